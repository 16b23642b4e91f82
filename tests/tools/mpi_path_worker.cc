// A rank of an `mpirun` job with CHORUS_TRANSPORT=mpi: the collectives run through MPI
// (comm/mpi_comm.h). Every check compares with a reference every rank computes alone.
//
// mpi_path_worker collectives     every collective, type and op against the reference
// mpi_path_worker process-sets    two overlapping process sets driven by two threads in
//                                 opposite orders on the shared rank (no deadlock)
// mpi_path_worker die-after N     allreduces until one fails; rank 1 SIGKILLs itself after N
// mpi_path_worker init-single     MPI_Init (MPI_THREAD_SINGLE) first, then chorus: refused
// mpi_path_worker plan            one allreduce; prints "plan=<the plan it ran> rank R"
// Prints "<mode> ok rank R" and exits 0; a wrong value exits 2 (naming it); a chorus error
// prints "mpi_path_worker: rank R: <ErrorType>: <message>" and exits 1.
#include <mpi.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/engine.h"
#include "chorus/error.h"
#include "chorus/job.h"
#include "util/reduce.h"

namespace {

using chorus::Communicator;
using chorus::DataType;
using chorus::ReduceOp;

int g_rank = -1;

[[noreturn]] void wrong(const std::string& what) {
  std::fprintf(stderr, "mpi_path_worker: rank %d: wrong: %s\n", g_rank, what.c_str());
  std::exit(2);
}

// Element i of rank r's input: 1, 2 or 3, so that sums and products of three ranks are
// exact in every type (int8 and float16 included).
int input(int r, size_t i) { return 1 + static_cast<int>((i * 7 + r) % 3); }

double reference(ReduceOp op, int size, size_t i) {
  double acc = input(0, i);
  for (int r = 1; r < size; ++r) {
    double v = input(r, i);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kProduct) acc *= v;
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) acc += v;
  }
  return op == ReduceOp::kAverage ? acc / size : acc;
}

void put(DataType t, void* p, size_t i, double v) {
  switch (t) {
    case DataType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      return;
    case DataType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      return;
    case DataType::kInt16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = chorus::float_to_half(static_cast<float>(v));
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = chorus::float_to_bfloat16(static_cast<float>(v));
      return;
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      return;
  }
}

double get(DataType t, const void* p, size_t i) {
  switch (t) {
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(p)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(p)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::kFloat16:
      return chorus::half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return chorus::bfloat16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
  }
  return 0;
}

bool is_integer(DataType t) {
  return t == DataType::kUInt8 || t == DataType::kInt8 || t == DataType::kInt16 ||
         t == DataType::kInt32 || t == DataType::kInt64;
}

// What rank-local element i of a reduction over `size` ranks must be.
double expected(DataType t, ReduceOp op, int size, size_t i) {
  double v = reference(op, size, i);
  if (op == ReduceOp::kAverage && is_integer(t)) v = static_cast<double>(static_cast<int64_t>(v));
  return v;
}

void check_close(DataType t, double got, double want, const std::string& what) {
  double tolerance = t == DataType::kFloat16 || t == DataType::kBFloat16 ? 0.02 * want : 1e-6;
  if (std::abs(got - want) > tolerance + 1e-12) {
    wrong(what + ": " + std::to_string(got) + " != " + std::to_string(want));
  }
}

std::vector<char> inputs(DataType t, int rank, size_t count) {
  std::vector<char> v(count * chorus::dtype_size(t));
  for (size_t i = 0; i < count; ++i) put(t, v.data(), i, input(rank, i));
  return v;
}

void check_allreduce(Communicator& comm, DataType t, ReduceOp op, bool in_place) {
  constexpr size_t kCount = 1001;
  std::vector<char> send = inputs(t, comm.rank(), kCount), recv(send.size());
  void* out = in_place ? send.data() : recv.data();
  comm.allreduce(send.data(), out, kCount, t, op);
  std::string what = std::string("allreduce ") + chorus::dtype_name(t) + " " +
                     chorus::reduce_op_name(op) + (in_place ? " in place" : "");
  for (size_t i = 0; i < kCount; ++i) {
    check_close(t, get(t, out, i), expected(t, op, comm.size(), i), what);
  }
  if (std::string(comm.last_plan()) != "mpi") wrong(what + ": plan " + comm.last_plan());
}

void check_parts(Communicator& comm) {
  std::vector<float> a(300), b(77);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(input(comm.rank(), i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(input(comm.rank(), 300 + i));
  comm.allreduce({{a.data(), a.data(), a.size()}, {b.data(), b.data(), b.size()}},
                 DataType::kFloat32, ReduceOp::kSum);
  for (size_t i = 0; i < a.size(); ++i)
    check_close(DataType::kFloat32, a[i], reference(ReduceOp::kSum, comm.size(), i), "parts a");
  for (size_t i = 0; i < b.size(); ++i)
    check_close(DataType::kFloat32, b[i], reference(ReduceOp::kSum, comm.size(), 300 + i),
                "parts b");
}

// Rank r has r + 2 elements, valued 100 r + i.
void check_allgatherv(Communicator& comm) {
  int p = comm.size();
  std::vector<size_t> counts(p);
  size_t total = 0;
  for (int r = 0; r < p; ++r) total += counts[r] = static_cast<size_t>(r) + 2;
  std::vector<int32_t> mine(counts[comm.rank()]), all(total);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = 100 * comm.rank() + static_cast<int>(i);
  comm.allgatherv(mine.data(), all.data(), counts, DataType::kInt32);
  size_t at = 0;
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < counts[r]; ++i, ++at) {
      if (all[at] != 100 * r + static_cast<int>(i)) wrong("allgatherv at " + std::to_string(at));
    }
  }
}

void check_broadcast(Communicator& comm) {
  std::vector<double> v(5000, comm.rank() == 1 ? 7.5 : -1.0);
  comm.broadcast(v.data(), v.size(), DataType::kFloat64, 1);
  for (double x : v) {
    if (x != 7.5) wrong("broadcast from root 1");
  }
}

// Rank r keeps r + 1 elements of the average.
void check_reduce_scatter(Communicator& comm) {
  int p = comm.size();
  std::vector<size_t> counts(p);
  size_t total = 0, offset = 0;
  for (int r = 0; r < p; ++r) {
    if (r == comm.rank()) offset = total;
    total += counts[r] = static_cast<size_t>(r) + 1;
  }
  std::vector<char> send = inputs(DataType::kFloat32, comm.rank(), total);
  std::vector<float> recv(counts[comm.rank()]);
  comm.reduce_scatter(send.data(), recv.data(), counts, DataType::kFloat32, ReduceOp::kAverage);
  for (size_t i = 0; i < recv.size(); ++i) {
    check_close(DataType::kFloat32, recv[i], reference(ReduceOp::kAverage, p, offset + i),
                "reduce_scatter average");
  }
}

// Rank s sends j + 1 elements, valued 1000 s + j, to rank j.
void check_alltoallv(Communicator& comm) {
  int p = comm.size(), me = comm.rank();
  std::vector<size_t> send_counts(p), recv_counts(p, static_cast<size_t>(me) + 1);
  std::vector<int64_t> send, recv(static_cast<size_t>(p) * (me + 1));
  for (int j = 0; j < p; ++j) {
    send_counts[j] = static_cast<size_t>(j) + 1;
    send.insert(send.end(), send_counts[j], 1000 * me + j);
  }
  comm.alltoallv(send.data(), send_counts, recv.data(), recv_counts, DataType::kInt64);
  for (int s = 0; s < p; ++s) {
    for (int k = 0; k <= me; ++k) {
      if (recv[static_cast<size_t>(s) * (me + 1) + k] != 1000 * s + me) wrong("alltoallv");
    }
  }
}

void check_split(Communicator& comm) {
  if (comm.rank() == 1) return;  // {0, 2}: collective over those two only
  auto pair = comm.split({0, comm.size() - 1}, "pair");
  int32_t v = comm.rank() + 1, sum = 0;
  pair->allreduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum);
  if (pair->size() != 2 || sum != comm.size() + 1) wrong("split {0, last} allreduce");
}

void collectives(Communicator& comm) {
  for (int t = 0; t < chorus::kNumDataTypes; ++t) {
    for (int o = 0; o < chorus::kNumReduceOps; ++o) {
      check_allreduce(comm, static_cast<DataType>(t), static_cast<ReduceOp>(o), false);
    }
    check_allreduce(comm, static_cast<DataType>(t), ReduceOp::kSum, true);
  }
  check_parts(comm);
  check_allgatherv(comm);
  check_broadcast(comm);
  check_reduce_scatter(comm);
  check_alltoallv(comm);
  comm.barrier();
  chorus::SharedBuffer b = comm.alloc_shared(4096);
  if (b.shared() || b.size() != 4096) wrong("alloc_shared over MPI");
  check_split(comm);
}

// Sets A = {0, 1} and B = {1, 2}: rank 1 drives A and B from two threads, in opposite
// orders of names, while 0 and 2 drive their one set. Every allreduce must add up.
void process_sets(Communicator& world) {
  auto engine = chorus::Engine::start(world);
  auto a = engine->add_process_set({0, 1});
  auto b = engine->add_process_set({1, 2});
  auto drive = [](chorus::ProcessSet& set, int base) {
    for (int k = 0; k < 40; ++k) {
      std::vector<float> v(10000, static_cast<float>(base + k));
      set.engine()
          .allreduce("t" + std::to_string(k), v.data(), v.data(), DataType::kFloat32,
                     {static_cast<int64_t>(v.size())})
          .wait();
      if (v[0] != 2.0f * (base + k)) wrong("process set allreduce " + std::to_string(k));
    }
  };
  std::vector<std::thread> threads;
  if (a->included()) threads.emplace_back([&] { drive(*a, 1); });
  if (b->included()) threads.emplace_back([&] { drive(*b, 1000); });
  for (auto& t : threads) t.join();
  engine->remove_process_set(b->id());
  engine->remove_process_set(a->id());
}

void die_after(Communicator& comm, long n) {
  std::vector<float> v(1 << 16, 1.0f);
  for (long k = 0;; ++k) {
    if (comm.rank() == 1 && k == n) std::raise(SIGKILL);
    comm.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kAverage);
  }
}

const char* type_of(const std::exception& e) {
  if (dynamic_cast<const chorus::TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const chorus::IoError*>(&e)) return "IoError";
  if (dynamic_cast<const chorus::InvalidArgument*>(&e)) return "InvalidArgument";
  return "exception";
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) g_rank = std::atoi(r);
  try {
    if (mode == "init-single") MPI_Init(&argc, &argv);
    auto job = chorus::Job::from_env();
    Communicator& comm = job->world();
    if (mode == "collectives") {
      collectives(comm);
    } else if (mode == "process-sets") {
      process_sets(comm);
    } else if (mode == "plan") {
      std::vector<float> v(1000, 1.0f);
      comm.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      std::printf("plan=%s rank %d\n", comm.last_plan(), comm.rank());
    } else if (mode == "die-after" && argc > 2) {
      die_after(comm, std::strtol(argv[2], nullptr, 10));
    } else {
      std::fprintf(
          stderr, "usage: mpi_path_worker collectives|process-sets|plan|die-after N|init-single\n");
      return 64;
    }
    std::printf("%s ok rank %d\n", mode.c_str(), comm.rank());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_path_worker: rank %d: %s: %s\n", g_rank, type_of(e), e.what());
    if (mode == "init-single") MPI_Finalize();
    return 1;
  }
  return 0;
}
