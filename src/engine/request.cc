#include "engine/request.h"

#include <sstream>

#include "chorus/error.h"
#include "util/byte_order.h"

namespace chorus::engine {
namespace {

constexpr uint32_t kMaxDims = 64;
constexpr uint32_t kMaxNameBytes = 4096;
// The fewest bytes one request takes on the wire: name length, three enums, the shared
// memory flag, root, two scale factors, two dimension counts.
constexpr size_t kMinRequestBytes = 4 + 3 + 1 + 4 + 8 + 8 + 4 + 4;

void put_dims(std::string& out, const std::vector<int64_t>& dims) {
  byte_order::put_u32(out, static_cast<uint32_t>(dims.size()));
  for (int64_t d : dims) byte_order::put_i64(out, d);
}

// A bounds-checked reader over the message of rank `from`: every count is checked against
// the bytes left before anything is allocated for it.
class Reader : public byte_order::ByteReader {
 public:
  Reader(const uint8_t* data, size_t size, int from)
      : ByteReader(std::string_view(reinterpret_cast<const char*>(data), size),
                   "malformed engine message from rank " + std::to_string(from)) {}

  // A list of int64: `what` names its entries in errors ("dimensions", "splits").
  std::vector<int64_t> get_list(uint32_t limit, const char* what) {
    auto n = u32();
    if (n > limit) fail(n, " ", what, " (at most ", limit, ")");
    if (left() < size_t{n} * sizeof(int64_t)) {
      fail("truncated (", size_t{n} * sizeof(int64_t), " bytes wanted, ", left(), " left)");
    }
    std::vector<int64_t> dims(n);
    for (auto& d : dims) d = i64();
    return dims;
  }
};

bool needs_first_dim(OpType op) {
  return op == OpType::kAllgather || op == OpType::kAlltoall || op == OpType::kReduceScatter;
}

// What enqueue checks on the sending rank (engine_ops.cc), checked again on the receiving
// one: validation and execution size buffers and index ranks by these fields.
void check_request(const Reader& in, const Request& r, int world) {
  for (int64_t d : r.shape) {
    if (d < 0) in.fail("'", r.name, "' has a negative dimension");
  }
  if (!within_tensor_limit(r.shape, r.dtype)) {
    in.fail("'", r.name, "' of shape ", shape_text(r.shape), " is over ", kMaxTensorBytes,
            " bytes");
  }
  if (needs_first_dim(r.op) && r.shape.empty()) in.fail("'", r.name, "' has no first dimension");
  if (r.op == OpType::kBroadcast ? r.root < 0 || r.root >= world : r.root != -1) {
    in.fail("'", r.name, "' has root ", r.root, " in a world of ", world);
  }
  if (r.op != OpType::kAlltoall) {
    if (!r.splits.empty()) in.fail("'", r.name, "' has splits but is no alltoall");
    return;
  }
  if (r.splits.size() != static_cast<size_t>(world)) {
    in.fail("'", r.name, "' has ", r.splits.size(), " splits for ", world, " ranks");
  }
  int64_t total = 0;
  for (int64_t s : r.splits) {
    if (s < 0 || s > r.shape[0] - total) in.fail("'", r.name, "' has splits beyond its rows");
    total += s;
  }
  if (total != r.shape[0]) in.fail("'", r.name, "' has splits that do not sum to its rows");
}

Request decode_one(Reader& in, int world) {
  Request r;
  auto name_len = in.u32();
  if (name_len == 0 || name_len > kMaxNameBytes) in.fail("a name of ", name_len, " bytes");
  r.name = std::string(in.bytes(name_len));
  const auto op = in.u8(), dtype = in.u8(), reduce = in.u8();
  const bool adasum = reduce == static_cast<int>(ReduceOp::kAdasum) &&
                      op == static_cast<int>(OpType::kAllreduce) && dtype < kNumDataTypes &&
                      is_floating_point(static_cast<DataType>(dtype));
  if (op > static_cast<int>(OpType::kAllocShared) || dtype >= kNumDataTypes ||
      (reduce >= kNumReduceOps && !adasum)) {
    in.fail("'", r.name, "' has an unknown op, data type or reduce op");
  }
  r.op = static_cast<OpType>(op);
  r.dtype = static_cast<DataType>(dtype);
  r.reduce = static_cast<ReduceOp>(reduce);
  const auto shared = in.u8();
  if (shared > 1 || (shared == 1 && r.op != OpType::kAllreduce)) {
    in.fail("'", r.name, "' has a shared-memory flag of ", int{shared});
  }
  r.in_shared_memory = shared == 1;
  r.root = in.i32();
  r.prescale = in.f64();
  r.postscale = in.f64();
  r.shape = in.get_list(kMaxDims, "dimensions");
  r.splits = in.get_list(static_cast<uint32_t>(world), "splits");
  check_request(in, r, world);
  return r;
}

}  // namespace

bool within_tensor_limit(const std::vector<int64_t>& shape, DataType dtype) {
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t d : shape) {
    if (d == 0) continue;
    if (bytes > kMaxTensorBytes / d) return false;
    bytes *= d;
  }
  return true;
}

int64_t Request::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Request::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

bool operator==(const Request& a, const Request& b) {
  return a.name == b.name && a.op == b.op && a.dtype == b.dtype && a.reduce == b.reduce &&
         a.root == b.root && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.shape == b.shape && a.splits == b.splits && a.in_shared_memory == b.in_shared_memory;
}

std::string shape_text(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  out << ']';
  return out.str();
}

void encode_requests(const std::vector<const Request*>& requests, std::string& out) {
  using namespace byte_order;
  put_u32(out, static_cast<uint32_t>(requests.size()));
  for (const Request* r : requests) {
    put_u32(out, static_cast<uint32_t>(r->name.size()));
    out.append(r->name);
    put_u8(out, static_cast<uint8_t>(r->op));
    put_u8(out, static_cast<uint8_t>(r->dtype));
    put_u8(out, static_cast<uint8_t>(r->reduce));
    put_u8(out, r->in_shared_memory ? 1 : 0);
    put_i32(out, r->root);
    put_f64(out, r->prescale);
    put_f64(out, r->postscale);
    put_dims(out, r->shape);
    put_dims(out, r->splits);
  }
}

size_t checked_message_total(const std::vector<int64_t>& sizes) {
  size_t total = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] < 0 || sizes[r] > kMaxMessageBytes) {
      CHORUS_THROW(IoError, "engine negotiation: rank ", r, " announced a message of ", sizes[r],
                   " bytes (at most ", kMaxMessageBytes, ")");
    }
    total += static_cast<size_t>(sizes[r]);
  }
  return total;
}

std::vector<Request> decode_requests(const uint8_t* data, size_t size, int from, int world) {
  Reader in(data, size, from);
  auto count = in.u32();
  if (count > in.left() / kMinRequestBytes) {
    in.fail(count, " requests in ", in.left(), " bytes");
  }
  std::vector<Request> out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) out.push_back(decode_one(in, world));
  in.finish();
  return out;
}

}  // namespace chorus::engine
