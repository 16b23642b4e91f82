// What one rank says about one named tensor when it is ready, and its wire encoding
// (exchanged with allgatherv during a full negotiation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chorus/dtype.h"
#include "chorus/engine.h"

namespace chorus::engine {

struct Request {
  std::string name;
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  int32_t root = -1;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  // allreduce: input and output lie in alloc_shared memory here. Agreed as "on every rank"
  // (Response::agreed); such a tensor runs alone, where the shared-memory allreduce can.
  bool in_shared_memory = false;

  int64_t elements() const;
  size_t bytes() const { return static_cast<size_t>(elements()) * dtype_size(dtype); }
  // Elements per row of the first dimension (1 for a scalar).
  int64_t row_elements() const;
};

bool operator==(const Request& a, const Request& b);
inline bool operator!=(const Request& a, const Request& b) { return !(a == b); }

// "[128, 10]"
std::string shape_text(const std::vector<int64_t>& dims);

// What a peer's message may claim, checked before anything is sized by it.
constexpr int64_t kMaxMessageBytes = int64_t{256} << 20;  // one rank's message
constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;     // one request's tensor

// Whether the non-zero dimensions of `shape` (none negative) multiply to at most
// kMaxTensorBytes of `dtype`: then no element, row or byte count derived from it overflows.
bool within_tensor_limit(const std::vector<int64_t>& shape, DataType dtype);

// Appends `requests` to `out` as one rank's message.
void encode_requests(const std::vector<const Request*>& requests, std::string& out);
// The sum of the message sizes the ranks announced, each checked to lie in
// [0, kMaxMessageBytes] before the buffer for them is allocated; IoError naming the rank.
size_t checked_message_total(const std::vector<int64_t>& sizes);
// Parses the message that rank `from` of `world` ranks sent. IoError when it is malformed:
// truncated or followed by bytes, a count or length that the bytes cannot hold, or a request
// that no rank's enqueue would have made (unknown enum, negative dimension, over
// kMaxTensorBytes, a root outside the world, splits that do not fit the op).
std::vector<Request> decode_requests(const uint8_t* data, size_t size, int from, int world);

}  // namespace chorus::engine
