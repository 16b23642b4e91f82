// chorusrun --dashboard's model: rank states, rates from reports, curves, events; and the
// timeline's last seconds.
#include "job_board.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "timeline_tail.h"

namespace chorus::web {
namespace {

struct Clocked {
  double t = 100;
  std::set<int> stopped;
  JobBoard::Options options(int np) {
    JobBoard::Options o;
    o.np = np;
    o.stall_seconds = 5;
    o.now = [this] { return t; };
    o.stopped = [this](int pid) { return stopped.count(pid) > 0; };
    return o;
  }
};

std::string report_text(int restart, double time, int steps, double loss) {
  return "host h1\nrestart " + std::to_string(restart) + "\ntime " + std::to_string(time) +
         "\nsteps " + std::to_string(steps) + "\nsamples " + std::to_string(steps * 64) +
         "\ncompute_s " + std::to_string(steps * 0.03) + "\nwait_s " +
         std::to_string(steps * 0.01) + "\ndata_s 0\nbytes " + std::to_string(steps * 1e6) +
         "\ntensors " + std::to_string(steps * 6) + "\nrss_bytes 104857600\nscalar.loss " +
         std::to_string(loss) + "\ncounter.engine_cycles " + std::to_string(steps * 2) +
         "\ncounter.engine_fused_tensors " + std::to_string(steps * 4) +
         "\ncounter.engine_cache_hits " + std::to_string(steps * 6) + "\n";
}

TEST(JobBoard, RatesStatesAndCurves) {
  Clocked c;
  JobBoard board(c.options(2));
  board.attempt_started(0, {{0, "localhost", 101, true}, {1, "localhost", 102, true}});
  std::string json = board.state_json();
  EXPECT_NE(json.find("\"state\":\"starting\""), std::string::npos) << json;
  board.report(0, report_text(0, 1000, 10, 2.0));
  board.report(1, report_text(0, 1000, 10, 2.1));
  c.t += 1;
  board.report(0, report_text(0, 1001, 30, 1.5));
  board.report(1, report_text(0, 1001, 30, 1.6));
  json = board.state_json();
  EXPECT_NE(json.find("\"rank\":0,\"host\":\"h1\",\"pid\":101,\"state\":\"live\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"steps\":30,\"steps_per_s\":20,\"samples_per_s\":1280"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"loss\":4"), std::string::npos) << json;  // 2 ranks x 2 points
  std::string html = board.fragment_html();
  EXPECT_NE(html.find("data-state=\"live\""), std::string::npos);
  EXPECT_NE(html.find("75%"), std::string::npos);  // compute share 0.03 / 0.04
  EXPECT_NE(html.find("<polyline"), std::string::npos);
  EXPECT_NE(html.find("response-cache hit rate"), std::string::npos);

  // A stopped process is stalled at once; a rank without progress after stall_seconds.
  c.stopped.insert(102);
  json = board.state_json();
  EXPECT_NE(json.find("\"state\":\"stalled\",\"detail\":\"process stopped (SIGSTOP)\""),
            std::string::npos)
      << json;
  c.t += 6;
  json = board.state_json();
  EXPECT_NE(json.find("\"rank\":0,\"host\":\"h1\",\"pid\":101,\"state\":\"stalled\""),
            std::string::npos)
      << json;
  // Killed: dead, whatever reports say later; then the restart.
  board.rank_exited(1, false, "rank 1 on localhost (pid 102) ended with signal SIGKILL");
  board.report(1, report_text(0, 1002, 40, 1.0));
  json = board.state_json();
  EXPECT_NE(json.find("\"state\":\"dead\""), std::string::npos) << json;
  EXPECT_NE(json.find("SIGKILL"), std::string::npos);
  board.attempt_ended("rank 1 ... SIGKILL", true);
  EXPECT_NE(board.state_json().find("\"job\":\"restarting\""), std::string::npos);
  board.attempt_started(1, {{0, "localhost", 201, true}, {1, "localhost", 202, true}});
  board.report(1, report_text(0, 1003, 50, 1.0));  // the old attempt's: ignored
  json = board.state_json();
  EXPECT_NE(json.find("\"restart\":1"), std::string::npos);
  EXPECT_NE(json.find("\"pid\":202,\"state\":\"starting\""), std::string::npos) << json;
  EXPECT_NE(json.find("attempt 1 started"), std::string::npos);
  board.job_ended("every rank exited 0");
  EXPECT_NE(board.state_json().find("\"job\":\"ended: every rank exited 0\""), std::string::npos);
}

TEST(JobBoard, StallWarningsAndHostileText) {
  Clocked c;
  JobBoard board(c.options(2));
  board.attempt_started(0, {{0, "<b>", 1, false}, {1, "x", 2, false}});
  board.output_line(0, "plain output");
  board.output_line(0,
                    "chorus WARNING [engine] stall: 1 tensor(s) submitted by some ranks only "
                    "for more than 0.3 s (CHORUS_STALL_CHECK_SECONDS): tensor 'grad/<x>' "
                    "(allreduce) submitted by ranks [0], missing ranks [1] (waiting 0.30 s)");
  std::string html = board.fragment_html();
  EXPECT_NE(html.find("stall warning from rank 0"), std::string::npos);
  EXPECT_NE(html.find("grad/&lt;x&gt;"), std::string::npos);
  EXPECT_NE(html.find("missing ranks [1]"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"l\">&lt;b&gt;</td>"), std::string::npos);  // the host
  board.report(5, "steps 1\n");                                               // no such rank
  board.report(0, std::string(100000, '\xff') + "\n");                        // garbage
  board.report(0, "restart 0\ntime 1\nhost <script>\nscalar.<x> 1\n");
  html = board.fragment_html();
  EXPECT_EQ(html.find("<script>"), std::string::npos);
}

TEST(JobBoard, SeesARealStoppedProcess) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  EXPECT_FALSE(JobBoard::process_stopped(pid));
  ::kill(pid, SIGSTOP);
  bool stopped = false;
  for (int i = 0; i < 100 && !stopped; ++i) {
    stopped = JobBoard::process_stopped(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(stopped);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(JobBoard::process_stopped(pid));
}

TEST(TimelineTail, KeepsRowNamesAndTheLastSeconds) {
  std::string path = "/tmp/chorus_timeline_tail_test." + std::to_string(::getpid());
  {
    std::ofstream f(path);
    f << "[\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":1,\"args\":{\"name\":\"a\"}}";
    for (int i = 0; i <= 10; ++i) {
      f << ",\n{\"name\":\"ALLREDUCE\",\"ph\":\"X\",\"pid\":0,\"tid\":1,\"ts\":" << i * 1000000
        << ",\"dur\":5}";
    }
    f << ",\n{\"name\":\"ALLREDUCE\",\"ph\":\"X\",\"ts\":999999999";  // being written
  }
  std::string tail = timeline_tail(path, 3);
  EXPECT_EQ(tail.rfind("[\n{\"name\":\"thread_name\"", 0), 0u) << tail;
  EXPECT_EQ(tail.find("\"ts\":6000000"), std::string::npos);
  EXPECT_NE(tail.find("\"ts\":7000000"), std::string::npos);
  EXPECT_NE(tail.find("\"ts\":10000000"), std::string::npos);
  EXPECT_EQ(tail.find("999999999"), std::string::npos);
  EXPECT_EQ(tail.substr(tail.size() - 3), "\n]\n");
  EXPECT_THROW(timeline_tail(path + ".missing", 3), std::exception);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace chorus::web
