// ConnectionServer (rendezvous/connection_server.h): an exception that escapes an owner's
// handler or on_accept hook costs that one connection, never the whole server.
#include "rendezvous/connection_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <stdexcept>

#include "test_util.h"

namespace chorus::rendezvous {
namespace {

using std::chrono::milliseconds;

// Reads one byte and acts on it: 'r', 'a' and 'i' throw (runtime_error, bad_alloc, a
// non-std int); anything else is echoed back.
void handler(Connection& c) {
  char byte = 0;
  net::recv_all(c.fd.get(), &byte, 1, Deadline::after(milliseconds(5000)), "test");
  if (byte == 'r') throw std::runtime_error("handler bug");
  if (byte == 'a') throw std::bad_alloc();
  if (byte == 'i') throw 42;
  net::send_all(c.fd.get(), &byte, 1, Deadline::after(milliseconds(5000)), "test");
}

// The server still echoes for a new client.
void expect_echo(uint16_t port) {
  net::Fd fd = testing::raw_connect(port);
  testing::send_bytes(fd.get(), "e");
  char byte = 0;
  net::recv_all(fd.get(), &byte, 1, Deadline::after(milliseconds(5000)), "test");
  EXPECT_EQ(byte, 'e');
}

TEST(ConnectionServer, HandlerThatThrowsDropsOnlyItsConnection) {
  ConnectionServer::Options options;
  options.poll_timeout_ms = [] { return 10; };
  ConnectionServer server(options, handler);
  server.start("127.0.0.1", 0);
  for (const char* bad : {"r", "a", "i"}) {
    net::Fd fd = testing::raw_connect(server.port());
    testing::send_bytes(fd.get(), bad);
    EXPECT_TRUE(testing::closed_by_peer(fd.get())) << "handler threw on '" << bad << "'";
  }
  expect_echo(server.port());
  server.stop();
}

TEST(ConnectionServer, OnAcceptThatThrowsRefusesOnlyThatSocket) {
  std::atomic<int> accepted{0};
  ConnectionServer::Options options;
  options.poll_timeout_ms = [] { return 10; };
  options.on_accept = [&](Connection&) -> bool {
    if (accepted.fetch_add(1) == 0) throw std::runtime_error("hook bug");
    return true;
  };
  ConnectionServer server(options, handler);
  server.start("127.0.0.1", 0);
  net::Fd first = testing::raw_connect(server.port());
  EXPECT_TRUE(testing::closed_by_peer(first.get())) << "the refused socket stayed open";
  expect_echo(server.port());
  server.stop();
}

}  // namespace
}  // namespace chorus::rendezvous
