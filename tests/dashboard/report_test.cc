// A rank's reports (chorus/report.h) arriving in a real store, and their parsing.
#include "chorus/report.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <chrono>
#include <random>
#include <thread>

#include "chorus/store.h"
#include "report/report_format.h"

namespace chorus::report {
namespace {

TEST(ReportFormat, ParsesWhatItShouldAndSkipsTheRest) {
  ParsedReport r = parse_report(
      "host node-1\nsteps 12\nsamples 768\nscalar.loss 0.25\nbad line here\n"
      "x\n 5\nnan nan\ninf inf\nweird$name 3\ncounter.engine_cycles 99\nsteps2 1e400\n");
  EXPECT_EQ(r.host, "node-1");
  EXPECT_EQ(r.get("steps"), 12);
  EXPECT_EQ(r.get("samples"), 768);
  EXPECT_EQ(r.get("scalar.loss"), 0.25);
  EXPECT_EQ(r.get("counter.engine_cycles"), 99);
  EXPECT_EQ(r.values.count("nan"), 0u);
  EXPECT_EQ(r.values.count("inf"), 0u);
  EXPECT_EQ(r.values.count("steps2"), 0u);
  EXPECT_EQ(r.values.count("weird$name"), 0u);
  EXPECT_EQ(r.get("missing", -1), -1);
  EXPECT_EQ(parse_report("host <script>\n").host, "script");
}

TEST(ReportFormat, RandomBytesNeverCrashAndStayBounded) {
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 40000, '\0');
    for (char& c : junk) c = static_cast<char>(rng() % 4 == 0 ? '\n' : rng() % 128);
    ParsedReport r = parse_report(junk);
    EXPECT_LE(r.values.size(), kMaxEntries);
    EXPECT_LE(r.host.size(), kMaxNameBytes);
  }
}

// The reporter is one per process and reads its environment once: this test owns it.
TEST(Reporter, SendsTotalsToTheStoreAtItsPeriod) {
  Secret secret = Secret::generate();
  TcpStoreServer server("127.0.0.1", 0, secret);
  ::setenv("CHORUS_SECRET", secret.bytes().c_str(), 1);
  ::setenv("CHORUS_STORE_ADDR", ("127.0.0.1:" + std::to_string(server.port())).c_str(), 1);
  ::setenv("CHORUS_REPORT_SECONDS", "0.1", 1);
  ::setenv("CHORUS_RANK", "3", 1);
  ::setenv("CHORUS_RESTART_COUNT", "2", 1);
  ::setenv("CHORUS_HOST_ID", "hostA", 1);
  ASSERT_TRUE(enabled());
  auto token = add_counters([] { return std::vector<std::pair<std::string, double>>{{"c1", 7}}; });
  for (int i = 0; i < 10; ++i) step({64, 0.01, 0.002, 0.001, 1000});
  scalar("loss", 0.5);
  scalar("loss", 0.4);
  TcpStoreClient client("127.0.0.1", server.port(), secret, std::chrono::seconds(5));
  // The thread sends at once and every 0.1 s: wait until the totals above show.
  ParsedReport r;
  for (int i = 0; i < 50 && r.get("steps") < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r = parse_report(client.get(report_key(2, 3), std::chrono::seconds(5)));
  }
  EXPECT_EQ(r.host, "hostA");
  EXPECT_EQ(r.get("rank"), 3);
  EXPECT_EQ(r.get("steps"), 10);
  EXPECT_EQ(r.get("samples"), 640);
  EXPECT_NEAR(r.get("compute_s"), 0.1, 1e-9);
  EXPECT_NEAR(r.get("wait_s"), 0.02, 1e-9);
  EXPECT_EQ(r.get("bytes"), 10000);
  EXPECT_EQ(r.get("scalar.loss"), 0.4);
  EXPECT_EQ(r.get("counter.c1"), 7);
  EXPECT_GT(r.get("rss_bytes"), 1 << 20);
  token.reset();  // the source is no longer called
  EXPECT_EQ(current_report().find("counter.c1"), std::string::npos);

  // What a step costs the training loop (printed; the limit is loose for loaded machines).
  auto t0 = std::chrono::steady_clock::now();
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    step({64, 0.01, 0.002, 0.001, 1000});
    scalar("loss", i);
  }
  double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
  std::printf("report::step + report::scalar: %.0f ns per step\n", ns);
  EXPECT_LT(ns, 20000);

  // What the reporting thread costs: the process's CPU time while the test thread sleeps
  // 3 s and the reporter sends every 0.1 s (the store server's side, in this process too,
  // included). chorusrun's period is 1 s.
  auto cpu = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  double c0 = cpu();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  double per_report_ms = (cpu() - c0) / 30 * 1000;
  std::printf("CPU per report (rank and store side): %.3f ms\n", per_report_ms);
  EXPECT_LT(per_report_ms, 20.0);
  flush_and_stop();
  r = parse_report(client.get(report_key(2, 3), std::chrono::seconds(5)));
  EXPECT_EQ(r.get("steps"), 10 + n);  // the last totals were sent on stop
}

}  // namespace
}  // namespace chorus::report
