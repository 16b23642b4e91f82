#include "engine/request.h"

#include <cstring>
#include <sstream>

#include "chorus/error.h"

namespace chorus::engine {
namespace {

constexpr uint32_t kMaxDims = 64;
constexpr uint32_t kMaxNameBytes = 4096;

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void put_dims(std::string& out, const std::vector<int64_t>& dims) {
  put<uint32_t>(out, static_cast<uint32_t>(dims.size()));
  for (int64_t d : dims) put<int64_t>(out, d);
}

// A bounds-checked reader over one rank's message.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ == end_; }

  template <typename T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, p_, sizeof(T));
    p_ += sizeof(T);
    return value;
  }
  std::string get_string(uint32_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<int64_t> get_dims(uint32_t limit) {
    auto n = get<uint32_t>();
    CHORUS_CHECK_ARG(n <= limit, "engine message: ", n, " dimensions exceed ", limit);
    std::vector<int64_t> dims(n);
    for (auto& d : dims) d = get<int64_t>();
    return dims;
  }

 private:
  void need(size_t n) const {
    CHORUS_CHECK_ARG(static_cast<size_t>(end_ - p_) >= n, "engine message truncated");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

Request decode_one(Reader& in) {
  Request r;
  auto name_len = in.get<uint32_t>();
  CHORUS_CHECK_ARG(name_len <= kMaxNameBytes, "engine message: name of ", name_len, " bytes");
  r.name = in.get_string(name_len);
  r.op = static_cast<OpType>(in.get<uint8_t>());
  r.dtype = static_cast<DataType>(in.get<uint8_t>());
  r.reduce = static_cast<ReduceOp>(in.get<uint8_t>());
  CHORUS_CHECK_ARG(static_cast<int>(r.op) <= static_cast<int>(OpType::kBarrier) &&
                       static_cast<int>(r.dtype) < kNumDataTypes &&
                       static_cast<int>(r.reduce) < kNumReduceOps,
                   "engine message: bad enum value");
  r.root = in.get<int32_t>();
  r.prescale = in.get<double>();
  r.postscale = in.get<double>();
  r.shape = in.get_dims(kMaxDims);
  r.splits = in.get_dims(1u << 20);
  return r;
}

}  // namespace

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
         a.shape == b.shape && a.splits == b.splits;
}

std::string shape_text(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  out << ']';
  return out.str();
}

void encode_requests(const std::vector<const Request*>& requests, std::string& out) {
  put<uint32_t>(out, static_cast<uint32_t>(requests.size()));
  for (const Request* r : requests) {
    put<uint32_t>(out, static_cast<uint32_t>(r->name.size()));
    out.append(r->name);
    put<uint8_t>(out, static_cast<uint8_t>(r->op));
    put<uint8_t>(out, static_cast<uint8_t>(r->dtype));
    put<uint8_t>(out, static_cast<uint8_t>(r->reduce));
    put<int32_t>(out, r->root);
    put<double>(out, r->prescale);
    put<double>(out, r->postscale);
    put_dims(out, r->shape);
    put_dims(out, r->splits);
  }
}

std::vector<Request> decode_requests(const uint8_t* data, size_t size) {
  Reader in(data, size);
  auto count = in.get<uint32_t>();
  CHORUS_CHECK_ARG(count <= (1u << 24), "engine message: ", count, " requests");
  std::vector<Request> out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) out.push_back(decode_one(in));
  CHORUS_CHECK_ARG(in.done(), "engine message: trailing bytes");
  return out;
}

}  // namespace chorus::engine
