// Hostile and broken peers: a wrong secret, garbage, malformed or oversized frames. Each
// connection is dropped and the server keeps serving well-behaved clients.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include "ps/wire.h"
#include "ps_test_util.h"
#include "rendezvous/auth.h"
#include "rendezvous/frame.h"
#include "util/net.h"

namespace chorus::ps::testing {
namespace {

std::string header(uint16_t type, uint32_t meta, uint64_t bulk, uint32_t magic = wire::kMagic) {
  std::string h(wire::kHeaderBytes, '\0');
  auto put = [&](size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) h[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  put(0, magic, 4);
  put(4, wire::kVersion, 2);
  put(6, type, 2);
  put(8, meta, 4);
  put(12, bulk, 8);
  return h;
}

void send_bytes(int fd, const std::string& bytes) {
  net::send_all(fd, bytes.data(), bytes.size(), Deadline::after(milliseconds(5000)), "test");
}

// True when the peer closes within the time limit; any reply bytes are read and ignored.
bool closed_by_peer(int fd) {
  Deadline deadline = Deadline::after(milliseconds(20000));
  char buf[256];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
    if (n > 0) continue;
    if (!net::wait_fd(fd, POLLIN, deadline)) return false;
  }
}

class PsSecurity : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = test_layout(1);
    make_client(cluster_)->create(layout_, Arrays(layout_.variables, 2.0f).in(), sgd(0.1));
  }
  net::Fd raw(bool authenticate) {
    net::Fd fd = net::connect_tcp({"127.0.0.1", cluster_.servers[0]->port()},
                                  Deadline::after(milliseconds(5000)));
    if (authenticate) {
      rendezvous::authenticate_client(fd.get(), test_secret(), wire::kPurpose,
                                      Deadline::after(milliseconds(5000)));
    }
    return fd;
  }
  void expect_still_serving() {
    auto client = make_client(cluster_);
    client->wait_for_variables(test_variables());
    Arrays got = Arrays::filled(layout_.variables, 0.0f);
    client->pull(got.out());
    EXPECT_EQ(got.data[0][0], 2.0f);
  }
  LocalCluster cluster_{1};
  ModelLayout layout_;
};

TEST_F(PsSecurity, WrongSecretIsRejected) {
  auto intruder = make_client(cluster_, milliseconds(5000), Secret("wrong"));
  try {
    intruder->wait_for_variables({});
    ADD_FAILURE() << "no AuthError";
  } catch (const AuthError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("parameter server 0 (" + cluster_.addresses[0] + ")"));
  }
  expect_still_serving();
}

TEST_F(PsSecurity, GarbageBeforeTheHandshakeIsDropped) {
  net::Fd fd = raw(false);
  send_bytes(fd.get(), std::string(64, 'x'));
  EXPECT_TRUE(closed_by_peer(fd.get()));
  expect_still_serving();
}

TEST_F(PsSecurity, BadFramesAreDropped) {
  const uint16_t push = static_cast<uint16_t>(wire::Type::kPush);
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"bad magic", header(push, 0, 0, 0x12345678)},
      {"meta over the limit", header(push, wire::kMaxMetaBytes + 1, 0)},
      {"unknown type", header(999, 0, 0)},
      {"malformed meta", header(push, 3, 0) + "abc"},
      // A push claiming 2^40 bytes: refused against the layout before any allocation.
      {"bulk not matching the layout", header(push, 16, uint64_t{1} << 40) + std::string(16, '\0')},
      {"bulk on a stats request", header(static_cast<uint16_t>(wire::Type::kStats), 0, 8)},
  };
  for (const auto& [what, bytes] : cases) {
    SCOPED_TRACE(what);
    net::Fd fd = raw(true);
    send_bytes(fd.get(), bytes);
    EXPECT_TRUE(closed_by_peer(fd.get()));
  }
  expect_still_serving();
}

TEST_F(PsSecurity, HostileCreateIsRefusedBeforeAllocating) {
  // A create that claims a variable of 2^40 elements: over CHORUS_PS_MAX_ELEMENTS.
  rendezvous::PayloadWriter meta;
  meta.u32(0).u32(1).u32(1).str("huge").i64(int64_t{1} << 40).u32(1).u32(0).i64(0).i64(int64_t{1} << 40);
  std::string m = meta.take();
  net::Fd fd = raw(true);
  send_bytes(fd.get(), header(static_cast<uint16_t>(wire::Type::kCreate), static_cast<uint32_t>(m.size()),
                              uint64_t{4} << 40) + m);
  EXPECT_TRUE(closed_by_peer(fd.get()));
  expect_still_serving();
}

// Not in the fixture: the environment is changed only while no server thread runs.
TEST(PsSecurityTimeout, StalledRequestIsDroppedAfterTheTimeout) {
  ::setenv("CHORUS_TIMEOUT_SECONDS", "0.5", 1);
  {
    LocalCluster cluster(1);
    net::Fd fd = net::connect_tcp({"127.0.0.1", cluster.servers[0]->port()},
                                  Deadline::after(milliseconds(5000)));
    rendezvous::authenticate_client(fd.get(), test_secret(), wire::kPurpose,
                                    Deadline::after(milliseconds(5000)));
    send_bytes(fd.get(), header(static_cast<uint16_t>(wire::Type::kStats), 0, 0).substr(0, 7));
    EXPECT_TRUE(closed_by_peer(fd.get()));
    auto client = make_client(cluster);
    EXPECT_EQ(client->stats(0).elements, 0);  // still serving
  }
  ::unsetenv("CHORUS_TIMEOUT_SECONDS");
}

}  // namespace
}  // namespace chorus::ps::testing
