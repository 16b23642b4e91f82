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

  int64_t elements() const;
  size_t bytes() const { return static_cast<size_t>(elements()) * dtype_size(dtype); }
  // Elements per row of the first dimension (1 for a scalar).
  int64_t row_elements() const;
};

bool operator==(const Request& a, const Request& b);
inline bool operator!=(const Request& a, const Request& b) { return !(a == b); }

// "[128, 10]"
std::string shape_text(const std::vector<int64_t>& dims);

// Appends `requests` to `out` as one rank's message.
void encode_requests(const std::vector<const Request*>& requests, std::string& out);
// Parses one rank's message; InvalidArgument on malformed or oversized input.
std::vector<Request> decode_requests(const uint8_t* data, size_t size);

}  // namespace chorus::engine
