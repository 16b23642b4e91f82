// chorus-bench: times collectives over chorus, OpenMPI or Gloo with the same sweep.
// Exit status: 0 all verified, 1 a verified run failed, 2 bad usage or a runtime error,
// 3 the requested peer was not built.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "backend.h"
#include "chorus/error.h"
#include "sweep.h"

namespace chorus::bench {
namespace {

const char kUsage[] =
    "usage: chorus-bench [options]\n"
    "  --op allreduce|allgather|broadcast|reduce_scatter|alltoall|all  (allreduce)\n"
    "  --min-bytes N, --max-bytes N  sizes, doubling; K/M/G suffixes   (8, 256M)\n"
    "  --dtype float32|float64|int32|int64                             (float32)\n"
    "  --iters N     timed samples per size, >= 20  (200 below 32 MiB, 20 from there)\n"
    "  --warmup N    untimed runs per size          (10 below 1 MiB, 5 below 32 MiB, 2)\n"
    "  --batch N     back-to-back ops per sample    (10 up to 64 KiB, 1 above)\n"
    "  --offset N    heap buffers start N bytes into a page (0; libtorch's: 64)\n"
    "  --in-place    allreduce: the output buffer is the input (as for gradients)\n"
    "  --algo NAME   chorus allreduce algorithm: auto|ring|halving_doubling|\n"
    "                recursive_doubling (default: CHORUS_ALLREDUCE_ALGO or auto)\n"
    "  --shared-buffers  chorus: send/recv buffers from Communicator::alloc_shared\n"
    "                (allreduce then runs in shared memory when ranks share a host)\n"
    "  --peer chorus|mpi|gloo  what to time (chorus)\n"
    "      chorus: under chorusrun, or per rank CHORUS_RANK/SIZE/SECRET with\n"
    "              MASTER_ADDR/PORT (rank 0 serves the store) or CHORUS_STORE_ADDR\n"
    "      mpi:    under mpirun (MPI_COMM_WORLD)\n"
    "      gloo:   CHORUS_RANK/SIZE (or OpenMPI's) and --gloo-store DIR; allreduce\n"
    "              float32 only; CHORUS_BENCH_GLOO_ALGO=ring_chunked|allreduce\n"
    "  --gloo-store DIR    gloo: file-store directory shared by the ranks\n"
    "  --gloo-iface IF     gloo: network interface (lo)\n"
    "  --label NAME        name in the header / csv backend column\n"
    "  --csv               comma-separated rows\n"
    "  --out FILE          rank 0 writes its rows to FILE instead of stdout\n"
    "  --no-check          skip the verified run\n";

struct Args {
  SweepOptions sweep;
  std::string peer = "chorus";
  ChorusBackendOptions chorus;
  std::string gloo_store;
  std::string gloo_iface = "lo";
  std::string out;  // --out FILE: rank 0's rows go there instead of stdout
};

uint64_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  CHORUS_CHECK_ARG(end != text.c_str(), "not a size: '", text, "'");
  std::string suffix(end);
  if (suffix == "K" || suffix == "k") return v << 10;
  if (suffix == "M" || suffix == "m") return v << 20;
  if (suffix == "G" || suffix == "g") return v << 30;
  CHORUS_CHECK_ARG(suffix.empty(), "not a size: '", text, "'");
  return v;
}

int parse_int(const std::string& text) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  CHORUS_CHECK_ARG(end != text.c_str() && *end == '\0', "not an integer: '", text, "'");
  return static_cast<int>(v);
}

size_t parse_offset(const std::string& text) {
  int v = parse_int(text);
  CHORUS_CHECK_ARG(v >= 0 && v < 4096, "--offset must be 0-4095 bytes, not ", text);
  return static_cast<size_t>(v);
}

// Applies one "--name value" option; returns false for an unknown name.
bool apply_option(Args& args, const std::string& name, const std::string& value) {
  using Setter = void (*)(Args&, const std::string&);
  static const std::map<std::string, Setter> kSetters = {
      {"--op", [](Args& a, const std::string& v) { a.sweep.ops = parse_ops(v); }},
      {"--min-bytes", [](Args& a, const std::string& v) { a.sweep.min_bytes = parse_bytes(v); }},
      {"--max-bytes", [](Args& a, const std::string& v) { a.sweep.max_bytes = parse_bytes(v); }},
      {"--dtype", [](Args& a, const std::string& v) { a.sweep.dtype = parse_dtype(v); }},
      {"--iters", [](Args& a, const std::string& v) { a.sweep.iters = parse_int(v); }},
      {"--warmup", [](Args& a, const std::string& v) { a.sweep.warmup = parse_int(v); }},
      {"--batch", [](Args& a, const std::string& v) { a.sweep.batch = parse_int(v); }},
      {"--offset", [](Args& a, const std::string& v) { a.sweep.offset = parse_offset(v); }},
      {"--label", [](Args& a, const std::string& v) { a.sweep.label = v; }},
      {"--algo", [](Args& a, const std::string& v) { a.chorus.algorithm = v; }},
      {"--peer", [](Args& a, const std::string& v) { a.peer = v; }},
      {"--gloo-store", [](Args& a, const std::string& v) { a.gloo_store = v; }},
      {"--gloo-iface", [](Args& a, const std::string& v) { a.gloo_iface = v; }},
      {"--out", [](Args& a, const std::string& v) { a.out = v; }},
  };
  auto it = kSetters.find(name);
  if (it == kSetters.end()) return false;
  it->second(args, value);
  return true;
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--csv") {
      args.sweep.csv = true;
    } else if (arg == "--no-check") {
      args.sweep.check = false;
    } else if (arg == "--in-place") {
      args.sweep.in_place = true;
    } else if (arg == "--shared-buffers") {
      args.chorus.shared_buffers = true;
    } else {
      std::string value;
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      } else {
        CHORUS_CHECK_ARG(i + 1 < argc, "option ", arg, " needs a value");
        value = argv[++i];
      }
      CHORUS_CHECK_ARG(apply_option(args, arg, value), "unknown option ", arg, "\n", kUsage);
    }
  }
  return args;
}

std::unique_ptr<Backend> make_backend(const Args& args) {
  if (args.peer == "chorus") return make_chorus_backend(args.chorus);
  if (args.peer == "mpi") return make_mpi_backend();
  if (args.peer == "gloo") return make_gloo_backend(args.gloo_store, args.gloo_iface);
  CHORUS_THROW(InvalidArgument, "unknown --peer '", args.peer, "' (chorus, mpi, gloo)");
}

int run(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  std::unique_ptr<Backend> backend = make_backend(args);
  std::ofstream file;
  if (!args.out.empty() && backend->rank() == 0) {
    file.open(args.out);
    CHORUS_CHECK_ARG(file.good(), "cannot write --out ", args.out);
  }
  std::ostream& out = file.is_open() ? file : std::cout;
  bool ok = run_sweep(*backend, args.sweep, out);
  if (!ok && backend->rank() == 0) out << "# FAIL: a verified run did not match\n";
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace chorus::bench

int main(int argc, char** argv) {
  try {
    return chorus::bench::run(argc, argv);
  } catch (const chorus::bench::NotBuilt& e) {
    std::cout << e.what() << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "chorus-bench: " << e.what() << std::endl;
    return 2;
  }
}
