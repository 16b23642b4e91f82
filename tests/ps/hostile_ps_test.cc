// A broken or hostile parameter server, played by FakePs: the client refuses replies that no
// real ps sends with UnavailableError naming the ps, instead of sizing anything from them or
// reading the next reply out of step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "fake_ps.h"
#include "ps/layout.h"
#include "ps/state_file.h"

namespace chorus::ps::testing {
namespace {

using rendezvous::PayloadWriter;
using ::testing::HasSubstr;
using wire::Type;

// What a ps may hold: one variable of 4 elements, plain SGD.
PartLayout small_part() {
  PartLayout part;
  part.variables = {{"w", 4}};
  part.shards = {Shard{0, 0, 4, 0}};
  return part;
}

// Answers kLayout with `part`, every other request with `other`.
FakePs::Answer with_layout(const PartLayout& part, FakePs::Answer other) {
  PayloadWriter out;
  out.u8(1);
  put_part(out, part);
  put_config(out, PsConfig{});
  std::string reply = message(Type::kOk, out.take());
  return [reply, other](Type type, const std::string& meta) -> FakePs::Reply {
    if (type == Type::kLayout) return {reply};
    return other(type, meta);
  };
}

FakePs::Reply no_answer(Type, const std::string&) { return {{}, true}; }

std::unique_ptr<PsClient> client_of(const FakePs& ps) {
  return std::make_unique<PsClient>(std::vector<std::string>{ps.address()}, test_secret(),
                                    milliseconds(5000));
}

// What `fn` threw: the message of an UnavailableError, or a text that says it was not one.
std::string unavailable_text(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UnavailableError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not an UnavailableError: ") + e.what();
  }
  return "no error";
}

// Lengths that add up to 2^64: a wrapped sum (0) would pass the limit, and the client
// would then receive pulls into arrays sized from the ps's numbers.
TEST(HostilePs, LayoutWhoseSizesWouldWrapIsRefused) {
  PartLayout part;
  part.variables = {{"a", INT64_MAX}, {"b", INT64_MAX}, {"c", 2}};
  part.shards = {Shard{0, 0, INT64_MAX, 0}, Shard{1, 0, INT64_MAX, 0}, Shard{2, 0, 2, 0}};
  FakePs ps(with_layout(part, no_answer));
  auto client = client_of(ps);
  std::string text = unavailable_text([&] { client->wait_for_variables({}); });
  EXPECT_THAT(text, HasSubstr("parameter server 0 (" + ps.address() + ") sent an invalid layout"));
  EXPECT_THAT(text, HasSubstr("would hold more than CHORUS_PS_MAX_ELEMENTS"));
}

// The layout fixes a state file's size exactly; a save of any other size is refused before
// anything is allocated for it (here 4 bytes too many, which a slack would let through).
TEST(HostilePs, SaveOfAnotherSizeIsRefused) {
  const uint64_t exact = state_file_size(small_part(), PsConfig{});
  FakePs ps(with_layout(small_part(), [exact](Type type, const std::string&) -> FakePs::Reply {
    if (type != Type::kSave) return no_answer(type, {});
    return {message(Type::kOk, {}, std::string(exact + 4, '\0'))};
  }));
  auto client = client_of(ps);
  client->wait_for_variables({});
  std::string text = unavailable_text([&] { client->save_state(); });
  EXPECT_THAT(text, HasSubstr("reply carries " + std::to_string(exact + 4) +
                              " bytes, the layout needs " + std::to_string(exact)));
}

// Only kOk carries data. Bulk on an error or timeout reply would stay in the stream and
// the next reply be read from it ("bad magic"): the connection is broken at once instead.
TEST(HostilePs, ErrorReplyCarryingDataBreaksTheConnection) {
  for (Type type : {Type::kError, Type::kTimeout}) {
    SCOPED_TRACE(static_cast<int>(type));
    FakePs ps([type](Type, const std::string&) -> FakePs::Reply {
      return {message(type, PayloadWriter().str("refused").take(), std::string(8, '\0'))};
    });
    auto client = client_of(ps);
    std::string text = unavailable_text([&] { client->stats(0); });
    EXPECT_THAT(text, HasSubstr("reply type " + std::to_string(static_cast<int>(type)) +
                                " carries 8 bytes of data (refused)"));
  }
}

// A ps that refuses a request before reading its bulk replies kError and closes the
// connection (docs/wire_format.md): the client's next call starts a new one rather than
// failing on the closed socket.
TEST(HostilePs, ErrorToARequestWithDataIsFollowedByANewConnection) {
  FakePs ps(with_layout(small_part(), [](Type type, const std::string&) -> FakePs::Reply {
    if (type == Type::kPush) return {message(Type::kError, PayloadWriter().str("no").take()), true};
    return {message(Type::kOk, PayloadWriter().i64(0).i64(0).i64(0).i64(4).take())};
  }));
  auto client = client_of(ps);
  client->wait_for_variables({});
  std::vector<float> grads(4, 1.0f);
  EXPECT_THROW(client->push({grads.data()}, 0), InvalidArgument);
  EXPECT_EQ(client->stats(0).elements, 4);
  EXPECT_EQ(ps.connections(), 2);
}

// Replies must be exactly their fields: trailing bytes mean a ps of another protocol or a
// corrupt stream.
TEST(HostilePs, RepliesWithTrailingBytesAreRefused) {
  FakePs ps(with_layout(small_part(), [](Type type, const std::string&) -> FakePs::Reply {
    if (type == Type::kPull) {
      return {message(Type::kOk, PayloadWriter().i64(0).take() + "x", std::string(16, '\0'))};
    }
    return no_answer(type, {});
  }));
  auto client = client_of(ps);
  client->wait_for_variables({});
  std::vector<float> values(4);
  EXPECT_THAT(unavailable_text([&] { client->pull({values.data()}); }),
              HasSubstr("sent a malformed pull reply"));

  FakePs stats_ps([](Type, const std::string&) -> FakePs::Reply {
    return {message(Type::kOk, PayloadWriter().i64(0).i64(0).i64(0).i64(4).take() + "x")};
  });
  EXPECT_THAT(unavailable_text([&] { client_of(stats_ps)->stats(0); }),
              HasSubstr("sent a malformed stats reply"));
}

}  // namespace
}  // namespace chorus::ps::testing
