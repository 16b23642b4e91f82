// Hostile and broken peers: a wrong secret, garbage, malformed or oversized frames, sizes
// that would wrap, a model announced but never sent. Each gets an error reply or has its
// connection dropped, and the server keeps serving well-behaved clients.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "fake_ps.h"
#include "ps/layout.h"
#include "ps/wire.h"
#include "ps_test_util.h"
#include "rendezvous/auth.h"
#include "rendezvous/frame.h"
#include "util/net.h"

namespace chorus::ps::testing {
namespace {

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
    EXPECT_THAT(e.what(),
                ::testing::HasSubstr("parameter server 0 (" + cluster_.addresses[0] + ")"));
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
  meta.u32(0)
      .u32(1)
      .u32(1)
      .str("huge")
      .i64(int64_t{1} << 40)
      .u32(1)
      .u32(0)
      .i64(0)
      .i64(int64_t{1} << 40);
  std::string m = meta.take();
  net::Fd fd = raw(true);
  send_bytes(fd.get(), header(static_cast<uint16_t>(wire::Type::kCreate),
                              static_cast<uint32_t>(m.size()), uint64_t{4} << 40) +
                           m);
  EXPECT_TRUE(closed_by_peer(fd.get()));
  expect_still_serving();
}

// Variables of 2^63 - 1, 2^63 - 1 and 2 elements, each in one shard here: the lengths add up
// to 2^64, which a plain int64 sum wraps to 0, past the limit and into a resize of 2^63 - 1
// floats (std::length_error: the whole ps gone). It must be refused like any other create
// over the limit; its bulk (0 bytes) was all read, so the connection stays open.
TEST_F(PsSecurity, CreateWhoseSizesWouldWrapGetsAnErrorReply) {
  PartLayout part;
  part.variables = {{"a", INT64_MAX}, {"b", INT64_MAX}, {"c", 2}};
  part.shards = {Shard{0, 0, INT64_MAX, 0}, Shard{1, 0, INT64_MAX, 0}, Shard{2, 0, 2, 0}};
  rendezvous::PayloadWriter meta;
  put_part(meta, part);
  put_config(meta, PsConfig{});
  net::Fd fd = raw(true);
  send_bytes(fd.get(), message(wire::Type::kCreate, meta.take()));
  wire::Header reply;
  std::string fields;
  ASSERT_TRUE(wire::receive(fd.get(), Deadline::after(milliseconds(20000)), "test", reply, fields));
  EXPECT_EQ(reply.type, wire::Type::kError);
  rendezvous::PayloadReader in(fields);
  EXPECT_THAT(in.str(), ::testing::HasSubstr("would hold more than CHORUS_PS_MAX_ELEMENTS"));
  expect_still_serving();  // with the variables of SetUp
}

size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

size_t bytes_queued(int fd) {
  int n = 0;
  return ::ioctl(fd, FIONREAD, &n) == 0 ? static_cast<size_t>(n) : 0;
}

// A peer (authenticated: this is past the handshake) that announces the most message
// fields allowed and sends a few bytes costs the reader about what it sent, not 64 MiB.
TEST(PsWireMemory, AnnouncedFieldsAreNotAllocatedBeforeTheyArrive) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  net::Fd reader(fds[0]), writer(fds[1]);
  const size_t before = resident_bytes();
  send_bytes(writer.get(),
             header(static_cast<uint16_t>(wire::Type::kPush), wire::kMaxMetaBytes, 0) +
                 std::string(100, 'x'));
  std::string error;
  std::thread receiving([&] {
    wire::Header h;
    std::string meta;
    try {
      wire::receive(reader.get(), Deadline::after(milliseconds(20000)), "test", h, meta);
    } catch (const IoError& e) {
      error = e.what();
    }
  });
  Deadline deadline = Deadline::after(milliseconds(20000));
  while (bytes_queued(reader.get()) > 0 && !deadline.expired()) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::this_thread::sleep_for(milliseconds(50));  // the reader now waits for the rest
  const size_t grown = resident_bytes() - std::min(before, resident_bytes());
  ::shutdown(writer.get(), SHUT_RDWR);
  receiving.join();
  EXPECT_LT(grown, size_t{8} << 20) << "the announced length was allocated up front";
  EXPECT_THAT(error, ::testing::HasSubstr("connection closed by peer"));
}

// An authenticated peer that announces a model part of 2^28 floats (1 GiB; the default
// CHORUS_PS_MAX_ELEMENTS allows 2^31) and sends a few values costs the ps about what it
// sent: the values grow as they arrive, the optimizer slots come after the last one.
TEST_F(PsSecurity, AnnouncedModelIsNotAllocatedBeforeItsValuesArrive) {
  const int64_t n = int64_t{1} << 28;
  PartLayout part;
  part.variables = {{"big", n}};
  part.shards = {Shard{0, 0, n, 0}};
  rendezvous::PayloadWriter meta;
  put_part(meta, part);
  put_config(meta, PsConfig{});
  std::string m = meta.take();
  const size_t before = resident_bytes();
  net::Fd fd = raw(true);
  uint16_t create = static_cast<uint16_t>(wire::Type::kCreate);
  send_bytes(fd.get(), header(create, static_cast<uint32_t>(m.size()), 4 * uint64_t(n)) + m +
                           std::string(4096, '\0'));
  // Watched for a second: before the bound, the ps zero-filled 1 GiB within milliseconds.
  size_t grown = 0;
  Deadline watch = Deadline::after(milliseconds(1000));
  while (!watch.expired() && grown < (size_t{256} << 20)) {
    std::this_thread::sleep_for(milliseconds(20));
    grown = resident_bytes() - std::min(before, resident_bytes());
  }
  EXPECT_LT(grown, size_t{16} << 20) << "the announced model was allocated up front";
  fd.reset();  // the create is cut off: the ps keeps its variables
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
