// State files and layout payloads: every malformed input is refused with a clear error,
// and hostile counts fail without a large allocation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "chorus/error.h"
#include "ps/layout.h"
#include "ps/ps_state.h"
#include "ps/state_file.h"

namespace chorus::ps {
namespace {

using rendezvous::PayloadReader;
using rendezvous::PayloadWriter;
using ::testing::HasSubstr;

PartLayout small_part() {
  PartLayout part;
  part.ps_index = 1;
  part.num_ps = 2;
  part.variables = {{"a", 10}, {"b", 4}};
  part.shards = {Shard{0, 5, 5, 1}, Shard{1, 0, 4, 1}};
  return part;
}

std::string small_file() {
  StateHeader h;
  h.part = small_part();
  h.config.optimizer.momentum = 0.9;  // one slot
  h.version = 3;
  h.steps = {3, 3};
  std::string file = encode_state_header(h);
  file.append(static_cast<size_t>(state_floats(h.part, h.config.optimizer)) * sizeof(float), '\0');
  return file;
}

TEST(StateFile, RoundTrip) {
  std::string file = small_file();
  size_t at = 0;
  StateHeader h = decode_state(file, at);
  EXPECT_TRUE(same_layout(h.part, small_part()));
  EXPECT_EQ(h.version, 3);
  EXPECT_EQ(h.steps, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(file.size() - at, 9u * 2 * sizeof(float));  // 9 elements, values + momentum
}

TEST(StateFile, RefusesDamagedFiles) {
  std::string file = small_file();
  size_t at = 0;
  EXPECT_THROW(decode_state(file.substr(0, file.size() - 1), at), InvalidArgument);  // truncated
  EXPECT_THROW(decode_state(file + "x", at), InvalidArgument);                       // padded
  EXPECT_THROW(decode_state(file.substr(0, 20), at), InvalidArgument);               // header cut
  EXPECT_THROW(decode_state("", at), InvalidArgument);
  std::string bad_magic = file;
  bad_magic[0] = 'X';
  EXPECT_THROW(decode_state(bad_magic, at), InvalidArgument);
  std::string huge_header = file;
  huge_header[11] = '\x7f';  // header length far past the end
  EXPECT_THROW(decode_state(huge_header, at), InvalidArgument);
}

TEST(LayoutPayload, RoundTripAndChecks) {
  PayloadWriter out;
  put_part(out, small_part());
  std::string bytes = out.take();
  PayloadReader in(bytes);
  EXPECT_TRUE(same_layout(get_part(in), small_part()));
  in.finish();

  PartLayout overlap = small_part();
  overlap.shards.push_back(Shard{0, 7, 2, 1});
  PayloadWriter w;
  put_part(w, overlap);
  std::string b = w.take();
  PayloadReader r(b);
  EXPECT_THROW(get_part(r), InvalidArgument);
}

TEST(LayoutPayload, HostileCountsFailCheaply) {
  // Claims 2^20 variables in a few bytes: fails at the payload's end, no huge reserve.
  std::string bytes = PayloadWriter().u32(0).u32(1).u32(1u << 20).str("a").i64(1).take();
  PayloadReader in(bytes);
  EXPECT_THROW(get_part(in), IoError);
  std::string too_many = PayloadWriter().u32(0).u32(1).u32(0xffffffffu).take();
  PayloadReader in2(too_many);
  EXPECT_THROW(get_part(in2), InvalidArgument);
}

TEST(Layout, ChecksCoverageAndLimits) {
  std::vector<VariableSpec> vars = {{"a", 10}};
  EXPECT_NO_THROW(check_layout(vars, {Shard{0, 0, 4, 0}, Shard{0, 4, 6, 1}}, 2));
  EXPECT_THROW(check_layout(vars, {Shard{0, 0, 4, 0}}, 2), InvalidArgument);  // gap
  EXPECT_THROW(check_layout(vars, {Shard{0, 0, 6, 0}, Shard{0, 4, 6, 1}}, 2), InvalidArgument);
  EXPECT_THROW(check_layout(vars, {Shard{0, 0, 10, 2}}, 2), InvalidArgument);  // ps
  EXPECT_THROW(check_layout(vars, {Shard{0, 0, 11, 0}}, 1), InvalidArgument);  // past end
  ::setenv("CHORUS_PS_MAX_ELEMENTS", "5", 1);
  EXPECT_THROW(check_layout(vars, {Shard{0, 0, 10, 0}}, 1), InvalidArgument);
  ::unsetenv("CHORUS_PS_MAX_ELEMENTS");
}

// Lengths of 2^63 - 1, 2^63 - 1 and 2 add up to 2^64, which a plain int64 sum wraps to 0:
// every limit check would pass and the shards be sized from the peer's numbers.
TEST(Layout, SizesThatWouldWrapAreRefused) {
  PartLayout part;
  part.variables = {{"a", INT64_MAX}, {"b", INT64_MAX}, {"c", 2}};
  part.shards = {Shard{0, 0, INT64_MAX, 0}, Shard{1, 0, INT64_MAX, 0}, Shard{2, 0, 2, 0}};
  auto expect_refused = [](const std::function<void()>& fn) {
    try {
      fn();
      ADD_FAILURE() << "no InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("would hold more than CHORUS_PS_MAX_ELEMENTS")) << e.what();
    }
  };
  expect_refused([&] { check_layout(part.variables, part.shards, 1); });  // the client's check
  PayloadWriter out;
  put_part(out, part);
  std::string bytes = out.take();
  expect_refused([&] {  // a create at the ps, a layout reply or state file at the client
    PayloadReader in(bytes);
    get_part(in);
  });
  expect_refused([&] { PsState::new_model(part, PsConfig{}); });  // a part that skipped those
}

}  // namespace
}  // namespace chorus::ps
