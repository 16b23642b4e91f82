#include "sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>

#include "chorus/error.h"
#include "verify.h"

namespace chorus::bench {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// A buffer from the backend or, when it has none, from the heap `offset` bytes into a page,
// touched once so that page faults stay out of the timed loop.
class Buffer {
 public:
  Buffer(Backend& backend, size_t bytes, size_t offset) {
    if (bytes == 0) return;
    data_ = backend.allocate(bytes);
    if (!data_) {
      void* p = nullptr;
      if (posix_memalign(&p, 4096, offset + bytes) != 0) {
        CHORUS_THROW(InvalidArgument, "chorus-bench: cannot allocate ", bytes, " bytes");
      }
      std::shared_ptr<void> page(p, std::free);
      data_ = std::shared_ptr<void>(page, static_cast<char*>(p) + offset);
    }
    std::memset(data_.get(), 0, bytes);
  }
  uint8_t* get() const { return static_cast<uint8_t*>(data_.get()); }

 private:
  std::shared_ptr<void> data_;
};

int default_iters(uint64_t bytes) { return bytes < 32 * kMiB ? 200 : 20; }
int default_warmup(uint64_t bytes) { return bytes < kMiB ? 10 : bytes < 32 * kMiB ? 5 : 2; }
int default_batch(uint64_t bytes) { return bytes <= 64 * 1024 ? 10 : 1; }

// Elements per rank (as in backend.h) for a sweep size of `bytes`.
size_t count_for(Op op, uint64_t bytes, DataType type, int ranks) {
  size_t elements = bytes / dtype_size(type);
  bool per_rank = op == Op::kAllgather || op == Op::kReduceScatter || op == Op::kAlltoall;
  return per_rank ? elements / ranks : elements;
}

uint64_t bytes_for(Op op, size_t count, DataType type, int ranks) {
  bool per_rank = op == Op::kAllgather || op == Op::kReduceScatter || op == Op::kAlltoall;
  return static_cast<uint64_t>(count) * dtype_size(type) * (per_rank ? ranks : 1);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// What an op reads: recv itself when in place (allreduce only).
const void* input(Op op, Buffer& send, Buffer& recv, bool in_place) {
  return in_place && op == Op::kAllreduce ? recv.get() : send.get();
}

// One verified run; true when every rank got the expected result.
bool verify(Backend& backend, Op op, Buffer& send, Buffer& recv, size_t count, DataType type,
            bool in_place) {
  fill_inputs(op, send.get(), recv.get(), count, type, backend.rank(), backend.size());
  const void* in = input(op, send, recv, in_place);
  if (in != send.get()) std::memcpy(recv.get(), send.get(), count * dtype_size(type));
  backend.run(op, in, recv.get(), count, type);
  std::string error = check_result(op, recv.get(), count, type, backend.rank(), backend.size());
  if (!error.empty()) std::cerr << "chorus-bench: FAIL: " << error << std::endl;
  std::vector<double> failed = {error.empty() ? 0.0 : 1.0};
  backend.max_across_ranks(failed);
  return failed[0] == 0.0;
}

// Median over samples of the slowest rank's time per op, in microseconds.
double time_op(Backend& backend, Op op, const void* send, Buffer& recv, size_t count, DataType type,
               int iters, int warmup, int batch) {
  for (int i = 0; i < warmup; ++i) backend.run(op, send, recv.get(), count, type);
  std::vector<double> samples(iters);
  for (int s = 0; s < iters; ++s) {
    backend.barrier();
    auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < batch; ++b) backend.run(op, send, recv.get(), count, type);
    std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    samples[s] = took.count() / batch;
  }
  backend.max_across_ranks(samples);
  return median(samples);
}

void print_header(const Backend& backend, const SweepOptions& options, Op op, std::ostream& out) {
  const std::string& label = options.label.empty() ? backend.name() : options.label;
  if (options.csv) return;
  out << "# chorus-bench: " << label << ", " << op_name(op) << ", " << backend.size() << " ranks, "
      << dtype_name(options.dtype) << ", sum\n";
  char line[160];
  std::snprintf(line, sizeof line, "# %12s %12s %11s %11s %6s %6s\n", "bytes", "time_us",
                "algbw_GBps", "busbw_GBps", "check", "iters");
  out << line;
}

void print_row(const Backend& backend, const SweepOptions& options, const SweepRow& row,
               std::ostream& out) {
  const std::string& label = options.label.empty() ? backend.name() : options.label;
  char line[256];
  if (options.csv) {
    std::snprintf(line, sizeof line, "%s,%s,%s,%d,%llu,%.3f,%.4f,%.4f,%s,%d\n", label.c_str(),
                  op_name(row.op), dtype_name(options.dtype), backend.size(),
                  static_cast<unsigned long long>(row.bytes), row.time_us, row.algbw_gbps,
                  row.busbw_gbps, row.ok ? "ok" : "FAIL", row.iters);
  } else {
    std::snprintf(line, sizeof line, "  %12llu %12.2f %11.3f %11.3f %6s %6d\n",
                  static_cast<unsigned long long>(row.bytes), row.time_us, row.algbw_gbps,
                  row.busbw_gbps, row.ok ? "ok" : "FAIL", row.iters);
  }
  out << line << std::flush;
}

// Sweeps one op; returns false when a verified run failed.
bool sweep_op(Backend& backend, const SweepOptions& options, Op op, std::ostream& out) {
  const int n = backend.size();
  const DataType type = options.dtype;
  size_t max_count = count_for(op, options.max_bytes, type, n);
  Buffer send(backend, send_elements(op, max_count, n) * dtype_size(type), options.offset);
  Buffer recv(backend, recv_elements(op, max_count, n) * dtype_size(type), options.offset);
  if (backend.rank() == 0) print_header(backend, options, op, out);
  bool all_ok = true;
  for (uint64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    size_t count = count_for(op, bytes, type, n);
    if (count == 0) continue;  // fewer bytes than one element per rank
    SweepRow row{op, bytes_for(op, count, type, n), 0, 0, 0, true, 0};
    row.ok = !options.check || verify(backend, op, send, recv, count, type, options.in_place);
    all_ok = all_ok && row.ok;
    row.iters = options.iters > 0 ? options.iters : default_iters(row.bytes);
    int warmup = options.warmup >= 0 ? options.warmup : default_warmup(row.bytes);
    int batch = options.batch > 0 ? options.batch : default_batch(row.bytes);
    row.time_us = time_op(backend, op, input(op, send, recv, options.in_place), recv, count, type,
                          row.iters, warmup, batch);
    row.algbw_gbps = row.bytes / row.time_us / 1e3;
    row.busbw_gbps = row.algbw_gbps * bus_factor(op, n);
    if (backend.rank() == 0) print_row(backend, options, row, out);
  }
  return all_ok;
}

}  // namespace

double bus_factor(Op op, int ranks) {
  switch (op) {
    case Op::kAllreduce:
      return 2.0 * (ranks - 1) / ranks;
    case Op::kAllgather:
    case Op::kReduceScatter:
    case Op::kAlltoall:
      return static_cast<double>(ranks - 1) / ranks;
    case Op::kBroadcast:
      return 1.0;
  }
  return 1.0;
}

bool run_sweep(Backend& backend, const SweepOptions& options, std::ostream& out) {
  CHORUS_CHECK_ARG(verifiable(options.dtype),
                   "chorus-bench supports float32, float64, int32, "
                   "int64; got ",
                   dtype_name(options.dtype));
  CHORUS_CHECK_ARG(options.iters == 0 || options.iters >= 20, "--iters must be at least 20");
  CHORUS_CHECK_ARG(options.min_bytes >= 1 && options.min_bytes <= options.max_bytes,
                   "need 1 <= --min-bytes <= --max-bytes");
  if (options.csv && backend.rank() == 0) {
    out << "backend,op,dtype,ranks,bytes,time_us,algbw_gbps,busbw_gbps,check,iters\n";
  }
  bool ok = true;
  for (Op op : options.ops) {
    if (!backend.supports(op, options.dtype)) {
      if (backend.rank() == 0 && !options.csv) {
        out << "# " << backend.name() << ": " << op_name(op) << " on " << dtype_name(options.dtype)
            << " not supported, skipped\n";
      }
      continue;
    }
    ok = sweep_op(backend, options, op, out) && ok;
  }
  return ok;
}

}  // namespace chorus::bench
