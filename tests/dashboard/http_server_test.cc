// HttpServer against garbage, slow clients, many clients at once and a wrong token.
#include "http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "http_client.h"

namespace chorus::web {
namespace {

using testing::get;
using testing::raw_request;

HttpResponse echo(const HttpRequest& req) {
  if (req.path == "/boom") throw std::runtime_error("handler bug");
  if (req.path == "/slow") std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return HttpResponse::text(200, "path=" + req.path + " x=" + req.param("x") + "\n");
}

HttpServer::Options quick() {
  HttpServer::Options o;
  o.request_timeout = std::chrono::milliseconds(500);
  return o;
}

TEST(HttpServer, AnswersGetAndHead) {
  HttpServer server("127.0.0.1", 0, quick(), echo);
  auto r = get(server.port(), "/a%20b?x=1+2&y");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "path=/a b x=1 2\n");
  EXPECT_NE(r.head.find("Content-Length: 16"), std::string::npos);
  EXPECT_NE(r.head.find("Connection: close"), std::string::npos);
  auto h = raw_request(server.port(), "HEAD / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "");
  EXPECT_EQ(server.served(), 2u);
}

TEST(HttpServer, RefusesWhatIsNotAGetOrHead) {
  HttpServer server("127.0.0.1", 0, quick(), echo);
  EXPECT_EQ(raw_request(server.port(), "POST / HTTP/1.1\r\n\r\n").status, 405);
  EXPECT_EQ(raw_request(server.port(), "GET / HTTP/9.9\r\n\r\n").status, 400);
  EXPECT_EQ(raw_request(server.port(), "GET nopath HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(raw_request(server.port(), "GET / HTTP/1.1 extra\r\n\r\n").status, 400);
  EXPECT_EQ(raw_request(server.port(), std::string("GET /\x01 HTTP/1.1\r\n\r\n")).status, 400);
  EXPECT_EQ(raw_request(server.port(), "\r\n\r\n").status, 400);
  // A head larger than the limit: 431, without waiting for its end.
  std::string big = "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n";
  EXPECT_EQ(raw_request(server.port(), big).status, 431);
  // A handler that throws: 500, and the server goes on.
  EXPECT_EQ(get(server.port(), "/boom").status, 500);
  EXPECT_EQ(get(server.port(), "/").status, 200);
}

TEST(HttpServer, SurvivesRandomGarbage) {
  HttpServer server("127.0.0.1", 0, quick(), echo);
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string junk(rng() % 3000, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (i % 3 == 0) junk += "\r\n\r\n";
    // Every fortieth stays open after its bytes: those wait out the request timeout.
    auto r = raw_request(server.port(), junk, i % 40 != 0);
    EXPECT_TRUE(r.status == 0 || r.status == 400 || r.status == 405 || r.status == 408 ||
                r.status == 431)
        << r.status;
  }
  EXPECT_EQ(get(server.port(), "/after").status, 200);
}

TEST(HttpServer, DropsSlowClientsAndServesOthersMeanwhile) {
  HttpServer::Options o = quick();
  o.request_timeout = std::chrono::milliseconds(3000);
  HttpServer server("127.0.0.1", 0, o, echo);
  // Ten clients that send half a request and then nothing (slowloris).
  std::vector<net::Fd> slow;
  for (int i = 0; i < 10; ++i) {
    slow.push_back(
        net::connect_tcp({"127.0.0.1", server.port()}, Deadline::after(std::chrono::seconds(2))));
    std::string part = "GET / HTTP/1.1\r\nHost: ";
    net::send_all(slow.back().get(), part.data(), part.size(),
                  Deadline::after(std::chrono::seconds(1)), "part");
  }
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(get(server.port(), "/meanwhile").status, 200);
  // Served long before the slow ones' 3 s are up (the bound leaves room for a loaded machine).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  // Each slow one gets 408 once the request timeout passed, and is closed.
  for (net::Fd& fd : slow) {
    std::string all;
    char buf[512];
    Deadline d = Deadline::after(std::chrono::seconds(6));
    while (size_t n = net::recv_some(fd.get(), buf, sizeof(buf), d, "slow")) all.append(buf, n);
    EXPECT_EQ(all.rfind("HTTP/1.1 408", 0), 0u) << all;
  }
  // A client that connects and sends nothing at all is closed without an answer.
  EXPECT_EQ(raw_request(server.port(), "", false).status, 0);
}

TEST(HttpServer, DoesNotWaitForAClientThatDoesNotRead) {
  HttpServer::Options o = quick();
  o.response_timeout = std::chrono::milliseconds(500);
  std::string huge(64 << 20, 'x');
  HttpServer server("127.0.0.1", 0, o,
                    [&](const HttpRequest&) { return HttpResponse::text(200, huge); });
  net::Fd fd =
      net::connect_tcp({"127.0.0.1", server.port()}, Deadline::after(std::chrono::seconds(2)));
  std::string req = "GET / HTTP/1.1\r\n\r\n";
  net::send_all(fd.get(), req.data(), req.size(), Deadline::after(std::chrono::seconds(1)), "r");
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // never reads
  EXPECT_EQ(get(server.port(), "/x").status, 200);
  server.stop();  // returns: the stuck connection's thread gave up
}

TEST(HttpServer, HundredConcurrentConnections) {
  HttpServer server("127.0.0.1", 0, quick(), echo);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 100; ++i) {
    threads.emplace_back([&, i] {
      if (get(server.port(), "/slow?x=" + std::to_string(i)).body ==
          "path=/slow x=" + std::to_string(i) + "\n")
        ok.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 100);
}

TEST(HttpServer, RefusesBeyondMaxClientsAndRecovers) {
  HttpServer::Options o = quick();
  o.max_clients = 4;
  o.request_timeout = std::chrono::milliseconds(1500);
  HttpServer server("127.0.0.1", 0, o, echo);
  std::vector<net::Fd> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(
        net::connect_tcp({"127.0.0.1", server.port()}, Deadline::after(std::chrono::seconds(2))));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(get(server.port(), "/").status, 0);  // refused: closed at once
  idle.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // reaped (poll of 1 s)
  EXPECT_EQ(get(server.port(), "/").status, 200);
}

TEST(HttpServer, TokenGuardsEveryPath) {
  HttpServer::Options o = quick();
  o.token = "s3cr&t";
  HttpServer server("127.0.0.1", 0, o, echo);
  EXPECT_EQ(get(server.port(), "/").status, 403);
  EXPECT_EQ(get(server.port(), "/?token=wrong").status, 403);
  EXPECT_EQ(get(server.port(), "/?token=s3cr").status, 403);
  EXPECT_EQ(get(server.port(), "/x?token=" + url_encode("s3cr&t")).status, 200);
  EXPECT_EQ(get(server.port(), "/x?token=s3cr%26t&x=2").body, "path=/x x=2\n");
}

TEST(HttpText, Escaping) {
  EXPECT_EQ(html_escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
  EXPECT_EQ(json_string("a\"b\\c\n<\x01\xff"), "\"a\\\"b\\\\c\\u000a\\u003c\\u0001\\u00ff\"");
  EXPECT_EQ(json_number(1.5), "1.5");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(url_decode("%zz%4", false), "%zz%4");
  EXPECT_EQ(url_decode(url_encode("a b/&=\x80"), false), "a b/&=\x80");
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("10.1.2.3"));
}

}  // namespace
}  // namespace chorus::web
