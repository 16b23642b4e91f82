// The non-allreduce ops: each one collective on engine-allocated outputs where the output
// size comes from negotiation (allgather, alltoall, reduce_scatter).
#include <numeric>

#include "engine/executor.h"
#include "engine/scale.h"

namespace chorus::engine {
namespace {

std::vector<size_t> elements(const std::vector<int64_t>& rows, int64_t row_elements) {
  std::vector<size_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = static_cast<size_t>(rows[i] * row_elements);
  return out;
}

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

// Resizes the op's engine-owned output and records its shape.
void* give_output(LocalOp* op, const Request& a, int64_t rows, size_t count) {
  HandleState& h = *op->handle;
  h.owned.resize(count * dtype_size(a.dtype));
  h.shape = a.shape;
  if (h.shape.empty()) h.shape.push_back(rows);
  h.shape[0] = rows;
  h.data = h.owned.data();
  h.bytes = h.owned.size();
  return h.owned.data();
}

}  // namespace

void Executor::allgather(const Response& r, LocalOp* op) {
  const Request& a = r.agreed;
  auto counts = elements(r.first_dims, a.row_elements());
  size_t total = sum(counts);
  int64_t rows = std::accumulate(r.first_dims.begin(), r.first_dims.end(), int64_t{0});
  void* out = op ? give_output(op, a, rows, total) : scratch(total * dtype_size(a.dtype));
  const void* in = op ? op->input : nullptr;
  comm_.allgatherv(in, out, counts, a.dtype);
}

void Executor::broadcast(const Response& r, LocalOp* op) {
  const Request& a = r.agreed;
  void* buf = op ? op->output : scratch(a.bytes());
  comm_.broadcast(buf, static_cast<size_t>(a.elements()), a.dtype, a.root);
}

void Executor::alltoall(const Response& r, LocalOp* op) {
  const Request& a = r.agreed;
  const int size = comm_.size(), me = comm_.rank();
  std::vector<int64_t> sent(size), received(size);
  for (int j = 0; j < size; ++j) {
    sent[j] = r.splits[me * size + j];
    received[j] = r.splits[j * size + me];
  }
  auto send_counts = elements(sent, op->request.row_elements());
  auto recv_counts = elements(received, op->request.row_elements());
  int64_t rows = std::accumulate(received.begin(), received.end(), int64_t{0});
  void* out = give_output(op, op->request, rows, sum(recv_counts));
  op->handle->received_splits = received;
  comm_.alltoallv(op->input, send_counts, out, recv_counts, a.dtype);
}

void Executor::reduce_scatter(const Response& r, LocalOp* op) {
  const Request& a = r.agreed;
  const int size = comm_.size(), me = comm_.rank();
  int64_t n = a.shape.empty() ? 1 : a.shape[0];
  std::vector<int64_t> rows(size);
  for (int i = 0; i < size; ++i) rows[i] = n / size + (i < n % size ? 1 : 0);
  auto counts = elements(rows, a.row_elements());
  size_t total = static_cast<size_t>(a.elements());
  // The send buffer: the caller's input, scaled into scratch when there is a prescale.
  const void* in = op ? op->input : scratch(a.bytes());
  if (op && a.prescale != 1.0) {
    void* tmp = scratch(a.bytes());
    scale_copy(a.dtype, tmp, in, total, a.prescale);
    in = tmp;
  }
  std::vector<uint8_t> joined_out;
  void* out;
  if (op) {
    out = give_output(op, a, rows[me], counts[me]);
  } else {
    joined_out.resize(counts[me] * dtype_size(a.dtype));
    out = joined_out.data();
  }
  comm_.reduce_scatter(in, out, counts, a.dtype, comm_op(r));
  finish_reduction(r, out, out, counts[me]);
}

}  // namespace chorus::engine
