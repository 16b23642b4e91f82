// Hostile and broken clients against a real TcpStoreServer over loopback. Each test checks
// both halves of the promise: the bad connection is dropped and counted, and the server
// still serves a good client afterwards. At the end, the other side: a fake store feeds a
// real client malformed replies.
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/error.h"
#include "chorus/store.h"
#include "rendezvous/auth.h"
#include "rendezvous/frame.h"
#include "rendezvous/store_protocol.h"
#include "test_util.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
using testing::closed_by_peer;
using testing::eventually;
using testing::raw_connect;
using testing::seconds_since;
using testing::send_bytes;

constexpr size_t kHandshakeMessageBytes = 40;  // docs/wire_format.md

class TcpStoreSecurityTest : public ::testing::Test {
 protected:
  TcpStoreSecurityTest() {
    TcpStoreServerOptions options;
    options.handshake_timeout = milliseconds(500);
    options.max_frame_bytes = 1 << 20;
    server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, secret_, options);
  }

  std::unique_ptr<TcpStoreClient> good_client() {
    return std::make_unique<TcpStoreClient>("127.0.0.1", server_->port(), secret_,
                                            milliseconds(5000));
  }

  // The server still answers a properly authenticated client.
  void expect_still_serving() {
    auto client = good_client();
    client->set("health", "ok");
    EXPECT_EQ(client->get("health", milliseconds(1000)), "ok");
  }

  void expect_rejections(uint64_t n) {
    EXPECT_TRUE(eventually([&] { return server_->rejected_connections() >= n; }))
        << "rejected_connections() stayed at " << server_->rejected_connections();
    EXPECT_EQ(server_->rejected_connections(), n);
  }

  // An authenticated raw socket, for sending hand-made frames.
  net::Fd authenticated_socket() {
    net::Fd fd = raw_connect(server_->port());
    rendezvous::authenticate_client(fd.get(), secret_, rendezvous::kStorePurpose,
                                    Deadline::after(milliseconds(5000)));
    return fd;
  }

  static std::string header(uint32_t magic, uint16_t version, uint16_t type, uint32_t length) {
    unsigned char bytes[rendezvous::kFrameHeaderBytes];
    rendezvous::encode_header({magic, version, type, length}, bytes);
    return std::string(reinterpret_cast<char*>(bytes), sizeof(bytes));
  }

  Secret secret_ = Secret::generate();
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreSecurityTest, GarbageInsteadOfAHandshakeIsDropped) {
  net::Fd fd = raw_connect(server_->port());
  send_bytes(fd.get(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(64, '\xee'));
  EXPECT_TRUE(closed_by_peer(fd.get()));
  expect_rejections(1);
  expect_still_serving();
}

TEST_F(TcpStoreSecurityTest, HugeLengthPrefixBeforeTheHandshakeIsDropped) {
  net::Fd fd = raw_connect(server_->port());
  send_bytes(fd.get(), std::string(8, '\xff'));  // what a length-first reader would trust
  EXPECT_TRUE(closed_by_peer(fd.get(), milliseconds(350))) << "dropped only by the timeout";
  expect_rejections(1);
  expect_still_serving();
}

TEST_F(TcpStoreSecurityTest, OversizedFrameLengthIsDroppedWithoutWaitingForThePayload) {
  net::Fd fd = authenticated_socket();
  auto start = Clock::now();
  send_bytes(fd.get(), header(rendezvous::kFrameMagic, rendezvous::kFrameVersion,
                              static_cast<uint16_t>(rendezvous::StoreOp::kSet), 0xFFFFFFFFu));
  // Dropped at once on the header alone: the server neither allocated 4 GiB nor waited
  // for it to arrive.
  EXPECT_TRUE(closed_by_peer(fd.get(), milliseconds(1000)));
  EXPECT_LT(seconds_since(start), 1.0);
  expect_rejections(1);
  expect_still_serving();
}

TEST_F(TcpStoreSecurityTest, BadFrameMagicVersionTypeOrPayloadIsDropped) {
  const uint16_t kSet = static_cast<uint16_t>(rendezvous::StoreOp::kSet);
  std::vector<std::string> bad = {
      header(0x12345678, rendezvous::kFrameVersion, kSet, 0),
      header(rendezvous::kFrameMagic, 99, kSet, 0),
      header(rendezvous::kFrameMagic, rendezvous::kFrameVersion, 777, 0),
      // A set whose key claims 1000 bytes inside an 8-byte payload.
      header(rendezvous::kFrameMagic, rendezvous::kFrameVersion, kSet, 8) +
          std::string("\xe8\x03\x00\x00kkkk", 8),
  };
  for (const auto& bytes : bad) {
    net::Fd fd = authenticated_socket();
    send_bytes(fd.get(), bytes);
    EXPECT_TRUE(closed_by_peer(fd.get()));
  }
  expect_rejections(bad.size());
  expect_still_serving();
}

// Lists over kMaxListStrings drop the connection before the server builds them: 250000
// empty keys (1 MB on the wire; 64 MiB of them used to cost a 537 MB reserve) and a wait
// on 65537 keys that are each valid.
TEST_F(TcpStoreSecurityTest, KeyListsOverTheLimitAreDropped) {
  std::vector<std::pair<rendezvous::StoreOp, std::string>> bad = {
      {rendezvous::StoreOp::kCheck,
       rendezvous::PayloadWriter().strs(std::vector<std::string>(250000)).take()},
      {rendezvous::StoreOp::kWait,
       rendezvous::PayloadWriter().strs(std::vector<std::string>(65537, "k")).i64(0).take()},
  };
  for (const auto& [op, payload] : bad) {
    net::Fd fd = authenticated_socket();
    rendezvous::write_frame(fd.get(), static_cast<uint16_t>(op), payload,
                            Deadline::after(milliseconds(5000)), "test");
    EXPECT_TRUE(closed_by_peer(fd.get())) << "request type " << static_cast<int>(op);
  }
  expect_rejections(bad.size());
  expect_still_serving();
}

// A stand-in for the store that passes the handshake and answers the client's requests
// with `replies`, in order, so that a test can hand the client malformed replies.
class FakeStore {
 public:
  FakeStore(const Secret& secret, std::vector<rendezvous::Frame> replies)
      : listener_(net::listen_tcp("127.0.0.1", 0)) {
    thread_ = std::thread([this, secret, replies = std::move(replies)] {
      try {
        auto deadline = [] { return Deadline::after(milliseconds(5000)); };
        net::Fd fd = net::accept_tcp(listener_.get(), deadline());
        rendezvous::authenticate_server(fd.get(), secret, rendezvous::kStorePurpose, deadline());
        rendezvous::Frame request;
        for (const auto& reply : replies) {
          if (!rendezvous::read_frame(fd.get(), 1 << 20, deadline(), "fake", request)) return;
          rendezvous::write_frame(fd.get(), reply.type, reply.payload, deadline(), "fake");
        }
      } catch (const std::exception& e) {
        error_ = e.what();
      }
    });
  }
  ~FakeStore() {
    thread_.join();
    EXPECT_EQ(error_, "") << "the fake store failed";
  }
  uint16_t port() const { return net::local_port(listener_.get()); }

 private:
  net::Fd listener_;
  std::string error_;  // written by thread_, read after join
  std::thread thread_;
};

TEST_F(TcpStoreSecurityTest, ClientRefusesRepliesWithTrailingBytes) {
  auto reply = [](rendezvous::StoreOp op, std::string payload) {
    return rendezvous::Frame{static_cast<uint16_t>(op), std::move(payload)};
  };
  using rendezvous::PayloadWriter;
  using rendezvous::StoreOp;
  // One reply per call below, each a valid reply plus trailing bytes (kOk is empty for
  // set and wait).
  FakeStore fake(secret_, {reply(StoreOp::kOk, "x"), reply(StoreOp::kOk, std::string(1, '\0')),
                           reply(StoreOp::kTimeout, PayloadWriter().strs({"k"}).take() + "zz"),
                           reply(StoreOp::kError, PayloadWriter().str("no").take() + "z")});
  TcpStoreClient client("127.0.0.1", fake.port(), secret_, milliseconds(5000));
  std::vector<std::function<void()>> calls = {
      [&] { client.set("k", "v"); },
      [&] { client.wait({"k"}, milliseconds(100)); },
      [&] { client.wait({"k"}, milliseconds(100)); },
      [&] { client.check({"k"}); },
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    try {
      calls[i]();
      ADD_FAILURE() << "call " << i << " accepted a reply with trailing bytes";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("trailing bytes"), std::string::npos) << e.what();
    } catch (const Error& e) {  // e.g. the TimeoutError or InvalidArgument the reply claims
      ADD_FAILURE() << "call " << i << " threw another error: " << e.what();
    }
  }
}

TEST_F(TcpStoreSecurityTest, WrongSecretFailsOnBothEnds) {
  try {
    TcpStoreClient client("127.0.0.1", server_->port(), Secret::generate(), milliseconds(5000));
    FAIL() << "a client with the wrong secret connected";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("authentication failed (wrong secret?)"),
              std::string::npos)
        << e.what();
  }
  expect_rejections(1);
  expect_still_serving();
}

// Relays exactly n bytes from one socket to another, keeping a copy.
std::string relay(int from, int to, size_t n) {
  std::string bytes(n, '\0');
  net::recv_all(from, bytes.data(), n, Deadline::after(milliseconds(5000)), "relay");
  send_bytes(to, bytes);
  return bytes;
}

TEST_F(TcpStoreSecurityTest, ReplayedHandshakeIsRejected) {
  // Record a good client's handshake through a man in the middle.
  net::Fd mitm = net::listen_tcp("127.0.0.1", 0);
  std::thread client([&, port = net::local_port(mitm.get())] {
    net::Fd fd = raw_connect(port);
    rendezvous::authenticate_client(fd.get(), secret_, rendezvous::kStorePurpose,
                                    Deadline::after(milliseconds(5000)));
  });
  net::Fd from_client = net::accept_tcp(mitm.get(), Deadline::after(milliseconds(5000)));
  net::Fd to_server = raw_connect(server_->port());
  std::string hello = relay(from_client.get(), to_server.get(), kHandshakeMessageBytes);
  relay(to_server.get(), from_client.get(), kHandshakeMessageBytes);  // challenge
  std::string proof = relay(from_client.get(), to_server.get(), kHandshakeMessageBytes);
  relay(to_server.get(), from_client.get(), kHandshakeMessageBytes);  // accept
  client.join();
  EXPECT_EQ(server_->rejected_connections(), 0u) << "the recorded handshake itself failed";

  // Replay it on a new connection: the server's fresh nonce makes the old proof wrong.
  net::Fd replay = raw_connect(server_->port());
  send_bytes(replay.get(), hello);
  std::string challenge(kHandshakeMessageBytes, '\0');
  net::recv_all(replay.get(), challenge.data(), challenge.size(),
                Deadline::after(milliseconds(5000)), "test");
  send_bytes(replay.get(), proof);
  std::string verdict(kHandshakeMessageBytes, '\0');
  net::recv_all(replay.get(), verdict.data(), verdict.size(), Deadline::after(milliseconds(5000)),
                "test");
  EXPECT_EQ(verdict[6], 5) << "expected a REJECT message";
  EXPECT_TRUE(closed_by_peer(replay.get()));
  expect_rejections(1);
  expect_still_serving();
}

TEST_F(TcpStoreSecurityTest, SilentClientsDoNotDelayOthersAndAreDroppedAfterTheTimeout) {
  std::vector<net::Fd> silent;
  for (int i = 0; i < 3; ++i) silent.push_back(raw_connect(server_->port()));
  auto start = Clock::now();
  expect_still_serving();
  EXPECT_LT(seconds_since(start), 0.25) << "a good client waited behind silent ones";
  for (auto& fd : silent) EXPECT_TRUE(closed_by_peer(fd.get(), milliseconds(3000)));
  expect_rejections(3);
  expect_still_serving();
}

TEST_F(TcpStoreSecurityTest, ClientsOverMaxClientsAreRefused) {
  TcpStoreServerOptions options;
  options.max_clients = 2;
  TcpStoreServer small("127.0.0.1", 0, secret_, options);
  TcpStoreClient a("127.0.0.1", small.port(), secret_, milliseconds(5000));
  TcpStoreClient b("127.0.0.1", small.port(), secret_, milliseconds(5000));
  EXPECT_THROW(TcpStoreClient("127.0.0.1", small.port(), secret_, milliseconds(2000)), IoError);
  a.set("k", "v");
  EXPECT_EQ(b.get("k", milliseconds(1000)), "v");
}

TEST_F(TcpStoreSecurityTest, ClientThatLeavesDuringALongGetFreesItsSlotPromptly) {
  TcpStoreServerOptions options;
  options.max_clients = 1;
  TcpStoreServer one_slot("127.0.0.1", 0, secret_, options);
  {
    net::Fd fd = raw_connect(one_slot.port());
    rendezvous::authenticate_client(fd.get(), secret_, rendezvous::kStorePurpose,
                                    Deadline::after(milliseconds(5000)));
    rendezvous::write_frame(fd.get(), static_cast<uint16_t>(rendezvous::StoreOp::kGet),
                            rendezvous::PayloadWriter().str("never").i64(60000).take(),
                            Deadline::after(milliseconds(5000)), "test");
    std::this_thread::sleep_for(milliseconds(50));
  }  // gone, as a client that timed out locally would be
  auto start = Clock::now();
  std::unique_ptr<TcpStoreClient> next;
  EXPECT_TRUE(eventually([&] {
    try {
      next = std::make_unique<TcpStoreClient>("127.0.0.1", one_slot.port(), secret_,
                                              milliseconds(1000));
      return true;
    } catch (const IoError&) {
      return false;  // the slot is still held by the abandoned get
    }
  }));
  EXPECT_LT(seconds_since(start), 3.0) << "the abandoned 60 s get held its slot";
  ASSERT_TRUE(next);
  next->set("k", "v");
  EXPECT_EQ(next->get("k", milliseconds(1000)), "v");
}

TEST_F(TcpStoreSecurityTest, ServerShutdownIsQuickAndClientsSeeIoError) {
  auto waiter = good_client();
  auto other = good_client();
  net::Fd silent = raw_connect(server_->port());
  std::thread t([&] { EXPECT_THROW(waiter->get("never", milliseconds(30000)), IoError); });
  std::this_thread::sleep_for(milliseconds(100));  // let the get reach the server
  auto start = Clock::now();
  server_.reset();
  EXPECT_LT(seconds_since(start), 1.0) << "destructor was slow";
  t.join();
  EXPECT_LT(seconds_since(start), 1.5) << "a blocked get was not released promptly";
  EXPECT_THROW(other->set("k", "v"), IoError);
  try {
    other->add("k", 1);  // the connection stays closed: later calls fail fast
    FAIL() << "call on a dead connection succeeded";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
  }
}

TEST_F(TcpStoreSecurityTest, ValueOverTheServersLimitIsRefusedButTheConnectionSurvives) {
  // This server's max_frame_bytes is 1 MiB: a 2 MiB frame is dropped as oversized, but a
  // value just over the value limit that still fits the frame gets a clear refusal.
  auto client = good_client();
  try {
    client->set("big", std::string((1 << 20) + 1, 'x'));
    FAIL() << "value over max_frame_bytes accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  client->set("small", "ok");
  EXPECT_EQ(client->get("small", milliseconds(1000)), "ok");
  EXPECT_EQ(server_->rejected_connections(), 0u);
}

}  // namespace
}  // namespace chorus
