#include "util/net.h"

#include <gtest/gtest.h>

#include <thread>

#include "chorus/error.h"

namespace chorus::net {

TEST(Endpoint, ParsesHostPortForms) {
  auto a = Endpoint::parse("127.0.0.1:29500");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 29500);
  auto b = Endpoint::parse("[::1]:80");
  EXPECT_EQ(b.host, "::1");
  EXPECT_EQ(b.to_string(), "[::1]:80");
  EXPECT_THROW(Endpoint::parse("nohost"), InvalidArgument);
  EXPECT_THROW(Endpoint::parse("h:0"), InvalidArgument);
  EXPECT_THROW(Endpoint::parse("h:65536"), InvalidArgument);
  EXPECT_THROW(Endpoint::parse("h:12ab"), InvalidArgument);
}

TEST(Net, SendsAndReceivesOverLoopback) {
  Fd listener = listen_tcp("127.0.0.1", 0);
  uint16_t port = local_port(listener.get());
  ASSERT_NE(port, 0);
  std::string got(1 << 20, '\0');
  std::thread server([&] {
    Fd conn = accept_tcp(listener.get(), Deadline::after(std::chrono::seconds(5)));
    recv_all(conn.get(), got.data(), got.size(), Deadline::after(std::chrono::seconds(5)), "test");
  });
  std::string sent(1 << 20, 'x');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 7);
  Fd conn = connect_tcp({"127.0.0.1", port}, Deadline::after(std::chrono::seconds(5)));
  send_all(conn.get(), sent.data(), sent.size(), Deadline::after(std::chrono::seconds(5)), "test");
  server.join();
  EXPECT_EQ(got, sent);
}

TEST(Net, ReceiveTimesOutAndClosedPeerIsIoError) {
  Fd listener = listen_tcp("127.0.0.1", 0);
  Fd client = connect_tcp({"127.0.0.1", local_port(listener.get())},
                          Deadline::after(std::chrono::seconds(5)));
  Fd server = accept_tcp(listener.get(), Deadline::after(std::chrono::seconds(5)));
  char byte;
  auto start = Clock::now();
  EXPECT_THROW(
      recv_all(client.get(), &byte, 1, Deadline::after(std::chrono::milliseconds(100)), "test"),
      TimeoutError);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(100));
  server.reset();
  EXPECT_THROW(recv_all(client.get(), &byte, 1, Deadline::after(std::chrono::seconds(5)), "test"),
               IoError);
}

TEST(Net, ConnectToNothingTimesOut) {
  Fd listener = listen_tcp("127.0.0.1", 0);
  uint16_t port = local_port(listener.get());
  listener.reset();  // nobody listens there now
  EXPECT_THROW(connect_tcp({"127.0.0.1", port}, Deadline::after(std::chrono::milliseconds(200))),
               TimeoutError);
}

}  // namespace chorus::net
