// The negotiation's wire format (engine/request.h): what a peer sends is decoded under
// bounds, and anything malformed — cut, padded, mutated or hostile — is an IoError naming
// the sending rank, never a crash or an allocation sized by the peer.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "engine/request.h"
#include "engine/response.h"

namespace chorus::engine {
namespace {

constexpr int kWorld = 4;
constexpr int kFrom = 3;

Request make(const std::string& name, OpType op, std::vector<int64_t> shape) {
  Request r;
  r.name = name;
  r.op = op;
  r.shape = std::move(shape);
  return r;
}

std::vector<Request> sample_requests() {
  Request sum = make("grad/fc1.weight", OpType::kAllreduce, {128, 21632});
  sum.reduce = ReduceOp::kAverage;
  sum.prescale = 0.5;
  sum.postscale = 2.0;
  Request bcast = make("params/conv", OpType::kBroadcast, {32, 1, 3, 3});
  bcast.root = 2;
  bcast.dtype = DataType::kFloat64;
  Request a2a = make("tokens", OpType::kAlltoall, {10, 7});
  a2a.dtype = DataType::kInt64;
  a2a.splits = {1, 2, 3, 4};
  Request bucket = make("grad/bucket.0", OpType::kAllreduce, {262144});
  bucket.in_shared_memory = true;
  return {sum,
          bcast,
          a2a,
          make("gathered", OpType::kAllgather, {5}),
          make("scalar", OpType::kAllreduce, {}),
          make("sync", OpType::kBarrier, {0}),
          bucket,
          make("memory", OpType::kAllocShared, {4096})};
}

std::string encode(const std::vector<Request>& requests) {
  std::vector<const Request*> ptrs;
  for (const Request& r : requests) ptrs.push_back(&r);
  std::string out;
  encode_requests(ptrs, out);
  return out;
}

std::vector<Request> decode(const std::string& bytes, int world = kWorld) {
  return decode_requests(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kFrom,
                         world);
}

// The message of the decoding error, or "" when `bytes` decoded.
std::string decode_error(const std::string& bytes, int world = kWorld) {
  try {
    decode(bytes, world);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

std::string one(const Request& r) { return encode({r}); }

// The bytes of docs/wire_format.md, "Engine negotiation", little-endian on every host.
TEST(EngineRequestWire, BytesAreTheDocumentedLittleEndianLayout) {
  Request r = make("ab", OpType::kBroadcast, {3});
  r.dtype = DataType::kFloat32;
  r.reduce = ReduceOp::kSum;
  r.root = 2;
  r.postscale = 2.0;
  const std::string want = std::string("\x01\0\0\0", 4) +  // count
                           std::string("\x02\0\0\0", 4) + "ab" +
                           std::string(1, static_cast<char>(OpType::kBroadcast)) +
                           std::string(1, static_cast<char>(DataType::kFloat32)) +
                           std::string(1, static_cast<char>(ReduceOp::kSum)) +
                           std::string("\0", 1) +                    // not in shared memory
                           std::string("\x02\0\0\0", 4) +            // root
                           std::string("\0\0\0\0\0\0\xf0\x3f", 8) +  // prescale 1.0
                           std::string("\0\0\0\0\0\0\0\x40", 8) +    // postscale 2.0
                           std::string("\x01\0\0\0", 4) + std::string("\x03\0\0\0\0\0\0\0", 8) +
                           std::string("\0\0\0\0", 4);  // no splits
  EXPECT_EQ(encode({r}), want);
  EXPECT_EQ(decode(want).at(0), r);
}

TEST(EngineRequestWire, RoundTripsEveryField) {
  const std::vector<Request> in = sample_requests();
  const std::vector<Request> out = decode(encode(in));
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], in[i]) << in[i].name;
  EXPECT_TRUE(decode(encode({})).empty());
}

TEST(EngineRequestWire, EveryCutAndEveryExtraByteIsAnError) {
  const std::string full = encode(sample_requests());
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string error = decode_error(full.substr(0, n));
    EXPECT_NE(error.find("malformed engine message from rank 3"), std::string::npos)
        << "cut at " << n << ": " << error;
  }
  EXPECT_NE(decode_error(full + '\0').find("1 trailing bytes"), std::string::npos);
}

TEST(EngineRequestWire, CountsBeyondTheBytesAreRefusedBeforeAllocating) {
  std::string many(4, '\xff');  // 4294967295 requests, no bytes for them
  EXPECT_NE(decode_error(many).find("4294967295 requests in 0 bytes"), std::string::npos);

  // A request whose dimension count claims 2^32 - 1 entries.
  std::string dims = one(make("t", OpType::kAllreduce, {}));
  const size_t shape_count_at = dims.size() - 8;  // shape count, then splits count
  std::memset(&dims[shape_count_at], 0xff, 4);
  EXPECT_NE(decode_error(dims).find("4294967295 dimensions (at most 64)"), std::string::npos);

  // 64 dimensions claimed, none sent.
  const uint32_t sixty_four = 64;
  std::memcpy(&dims[shape_count_at], &sixty_four, 4);
  EXPECT_NE(decode_error(dims).find("truncated (512 bytes wanted"), std::string::npos);
}

TEST(EngineRequestWire, RequestsNoEnqueueCouldMakeAreRefused) {
  auto error_of = [](const Request& r) { return decode_error(one(r)); };
  auto expect_error = [&](const Request& r, const std::string& text) {
    const std::string error = error_of(r);
    EXPECT_NE(error.find(text), std::string::npos)
        << "expected '" << text << "', got '" << error << "'";
  };
  expect_error(make("neg", OpType::kAllreduce, {4, -1}), "'neg' has a negative dimension");
  expect_error(make("huge", OpType::kAllreduce, {int64_t{1} << 31, int64_t{1} << 31, 4}),
               "'huge' of shape [2147483648, 2147483648, 4] is over 1099511627776 bytes");
  // Zero rows do not excuse the rest: a row count derived from it would overflow.
  expect_error(make("wide", OpType::kAllgather, {0, int64_t{1} << 40, int64_t{1} << 40}),
               "'wide' of shape [0, 1099511627776, 1099511627776] is over");
  expect_error(make("flat", OpType::kAllgather, {}), "'flat' has no first dimension");
  expect_error(make("", OpType::kAllreduce, {1}), "a name of 0 bytes");

  Request bcast = make("b", OpType::kBroadcast, {1});
  bcast.root = kWorld;
  expect_error(bcast, "'b' has root 4 in a world of 4");
  bcast.root = -1;
  expect_error(bcast, "'b' has root -1 in a world of 4");
  Request rooted = make("r", OpType::kAllreduce, {1});
  rooted.root = 0;
  expect_error(rooted, "'r' has root 0 in a world of 4");

  Request a2a = make("a", OpType::kAlltoall, {10});
  a2a.splits = {1, 2, 3};
  expect_error(a2a, "'a' has 3 splits for 4 ranks");
  a2a.splits = {1, 2, 3, 5};
  expect_error(a2a, "'a' has splits beyond its rows");
  a2a.splits = {1, 2, 3, 3};
  expect_error(a2a, "'a' has splits that do not sum to its rows");
  a2a.splits = {-1, 5, 3, 3};
  expect_error(a2a, "'a' has splits beyond its rows");
  a2a.splits = {1, 2, 3, 4, 0};
  expect_error(a2a, "5 splits (at most 4)");
  Request split_sum = make("s", OpType::kAllreduce, {4});
  split_sum.splits = {1, 1, 1, 1};
  expect_error(split_sum, "'s' has splits but is no alltoall");

  std::string bad_enum = one(make("e", OpType::kAllreduce, {1}));
  // count, name length, "e", op, then the dtype byte
  bad_enum[4 + 4 + 1 + 1] = static_cast<char>(kNumDataTypes);
  EXPECT_NE(decode_error(bad_enum).find("'e' has an unknown op, data type or reduce op"),
            std::string::npos);

  // Adasum: an allreduce of floats only.
  Request adasum = make("d", OpType::kAllreduce, {2});
  adasum.dtype = DataType::kFloat32;
  adasum.reduce = ReduceOp::kAdasum;
  EXPECT_EQ(decode(one(adasum)).at(0), adasum);
  adasum.dtype = DataType::kInt32;
  expect_error(adasum, "'d' has an unknown op, data type or reduce op");
  adasum = make("d", OpType::kReduceScatter, {4});
  adasum.dtype = DataType::kFloat32;
  adasum.reduce = ReduceOp::kAdasum;
  expect_error(adasum, "'d' has an unknown op, data type or reduce op");

  // The shared-memory flag: 0 or 1, and 1 only on an allreduce.
  const size_t flag_at = 4 + 4 + 1 + 3;  // count, name length, "f", three enums
  std::string flag = one(make("f", OpType::kAllreduce, {1}));
  flag[flag_at] = 2;
  EXPECT_NE(decode_error(flag).find("'f' has a shared-memory flag of 2"), std::string::npos);
  std::string flagged_gather = one(make("f", OpType::kAllgather, {1}));
  flagged_gather[flag_at] = 1;
  EXPECT_NE(decode_error(flagged_gather).find("'f' has a shared-memory flag of 1"),
            std::string::npos);
  flag[flag_at] = 1;
  EXPECT_TRUE(decode(flag).at(0).in_shared_memory);
}

// Random damage to a valid message: each result decodes or is an IoError, nothing else.
TEST(EngineRequestWire, MutatedMessagesDecodeOrFailCleanly) {
  const std::string full = encode(sample_requests());
  std::mt19937 rng(20261122);
  int refused = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    try {
      decode(bytes);
    } catch (const IoError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);  // the damage did reach the checks
}

TEST(EngineRequestWire, AnnouncedSizesAreCheckedBeforeTheBufferIsAllocated) {
  EXPECT_EQ(checked_message_total({0, 10, kMaxMessageBytes}),
            static_cast<size_t>(10 + kMaxMessageBytes));
  try {
    checked_message_total({5, -1});
    FAIL() << "a negative size was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 announced a message of -1 bytes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(checked_message_total({kMaxMessageBytes + 1}), IoError);
}

// Outputs the engine allocates are sized by other ranks' requests: each request is within
// the limit, but their sum must be too, and every rank reaches the same verdict.
TEST(EngineResponse, OutputsSizedByPeersStayWithinTheTensorLimit) {
  const int64_t rows = kMaxTensorBytes / 4 / 1024;  // float32 rows of 1024: exactly the limit
  std::vector<std::optional<Request>> gather(kWorld, make("g", OpType::kAllgather, {0, 1024}));
  gather[1]->shape[0] = rows;
  EXPECT_EQ(make_response("g", gather).error, "");
  gather[2]->shape[0] = 1;
  EXPECT_NE(make_response("g", gather)
                .error.find("allgather 'g': the gathered tensor would have " +
                            std::to_string(rows + 1) + " rows of 4096 bytes, over 1099511627776"),
            std::string::npos);

  std::vector<std::optional<Request>> a2a(kWorld, make("a", OpType::kAlltoall, {rows, 1024}));
  for (int r = 0; r < kWorld; ++r) a2a[r]->splits = {0, rows, 0, 0};  // all to rank 1
  a2a[0]->splits = {0, 0, rows, 0};
  EXPECT_NE(make_response("a", a2a).error.find("alltoall 'a': the output of rank 1 would have " +
                                               std::to_string(3 * rows)),
            std::string::npos);
  for (int r = 0; r < kWorld; ++r) a2a[r]->splits = {0, 0, 0, 0};
  for (int r = 0; r < kWorld; ++r) a2a[r]->splits[r] = rows;  // each keeps its own rows
  EXPECT_EQ(make_response("a", a2a).error, "");
}

// A tensor runs as "in shared memory" only when it is on every rank that submitted it; a
// rank whose buffer is elsewhere is no mismatch (the allreduce runs the usual way).
TEST(EngineResponse, SharedMemoryIsAgreedOnlyWhenEveryRankHasIt) {
  Request shared = make("b", OpType::kAllreduce, {1024});
  shared.in_shared_memory = true;
  std::vector<std::optional<Request>> all(kWorld, shared);
  EXPECT_TRUE(make_response("b", all).agreed.in_shared_memory);
  all[3].reset();  // joined: not asked
  EXPECT_TRUE(make_response("b", all).agreed.in_shared_memory);
  all[2]->in_shared_memory = false;
  Response mixed = make_response("b", all);
  EXPECT_EQ(mixed.error, "");
  EXPECT_FALSE(mixed.agreed.in_shared_memory);
}

}  // namespace
}  // namespace chorus::engine
