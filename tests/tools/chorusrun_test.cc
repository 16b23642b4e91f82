// Drives the real chorusrun binary with fake_worker (see fake_worker.cc for its modes).
#include <sched.h>
#include <signal.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "run_helper.h"

namespace chorus::test {
namespace {

const std::string kWorker = FAKE_WORKER_PATH;
const std::string kAllreduce = ALLREDUCE_WORKER_PATH;

RunResult run(std::vector<std::string> args) { return run_chorusrun(RunSpec{std::move(args)}); }

TEST(Chorusrun, EveryRankGetsItsEnvironment) {
  for (int np : {1, 2, 3, 8}) {
    SCOPED_TRACE("np=" + std::to_string(np));
    RunResult r =
        run({"-np", std::to_string(np), "-x", "CHORUS_TEST_EXPORT=hello", kWorker, "env"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string store;
    for (int rank = 0; rank < np; ++rank) {
      auto vars = env_of(r, rank);
      EXPECT_EQ(vars["CHORUS_RANK"], std::to_string(rank));
      EXPECT_EQ(vars["CHORUS_SIZE"], std::to_string(np));
      EXPECT_EQ(vars["CHORUS_LOCAL_RANK"], std::to_string(rank));
      EXPECT_EQ(vars["CHORUS_LOCAL_SIZE"], std::to_string(np));
      EXPECT_EQ(vars["CHORUS_CROSS_RANK"], "0");
      EXPECT_EQ(vars["CHORUS_CROSS_SIZE"], "1");
      // Horovod's names too, for Horovod scripts and tests.
      for (const char* v :
           {"RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"}) {
        EXPECT_EQ(vars[std::string("HOROVOD_") + v], vars[std::string("CHORUS_") + v]) << v;
      }
      EXPECT_EQ(vars["CHORUS_RESTART_COUNT"], "0");
      EXPECT_EQ(vars["CHORUS_TEST_EXPORT"], "hello");
      EXPECT_EQ(vars["CHORUS_SECRET"], "");  // never in the environment
      EXPECT_EQ(vars["secret_file_mode"], "600");
      EXPECT_EQ(vars["CHORUS_STORE_ADDR"].rfind("127.0.0.1:", 0), 0u) << vars["CHORUS_STORE_ADDR"];
      if (rank == 0) store = vars["CHORUS_STORE_ADDR"];
      EXPECT_EQ(vars["CHORUS_STORE_ADDR"], store);
    }
  }
}

TEST(Chorusrun, LinesArePrefixedAndNeverInterleaved) {
  const int np = 8, lines = 400;
  RunResult r = run({"-np", std::to_string(np), "--", kWorker, "lines", std::to_string(lines)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::regex whole(R"(\[(\d)\] rank (\d) line \d+ ([a-z])\3{199} end)");
  std::map<int, int> count;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, whole)) << "broken line: " << line.substr(0, 120);
    ASSERT_EQ(m[1], m[2]);
    ++count[std::stoi(m[1])];
  }
  for (int rank = 0; rank < np; ++rank) EXPECT_EQ(count[rank], lines) << "rank " << rank;
}

TEST(Chorusrun, OutputDirHoldsOneLogPerRank) {
  TempDir dir;
  RunResult r = run({"-np", "3", "--output-dir", dir.path(), kWorker, "env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("CHORUS_RANK"), std::string::npos);
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream log(dir.path() + "/rank." + std::to_string(rank) + ".log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("CHORUS_RANK=" + std::to_string(rank) + "\n"), std::string::npos) << text;
  }
}

TEST(Chorusrun, ExitCodeOfAFailedRankIsReported) {
  RunResult r = run({"-np", "2", kWorker, "exit", "3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(rank [01] on localhost \(pid \d+\) ended with exit code 3)")))
      << r.err;
  EXPECT_NE(r.err.find("job failed"), std::string::npos) << r.err;
}

TEST(Chorusrun, CrashNamesRankAndSignalAndStopsTheOthers) {
  RunResult r = run({"-np", "4", "--grace-seconds", "5", kWorker, "crash", "2"});
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV);
  EXPECT_NE(r.err.find("rank 2 on localhost"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGSEGV"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 4.0) << "the sleeping ranks should stop on SIGTERM, not after the grace";
}

std::vector<pid_t> wait_for_pids(const std::string& dir, int np) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < np; ++rank) {
    std::string path = dir + "/pid." + std::to_string(rank);
    if (!wait_for_file(path, std::chrono::seconds(10))) return {};
    pids.push_back(read_pid(path));
  }
  return pids;
}

// Starts `np` sleeping workers, sends chorusrun `sig` once they all run; returns their pids.
RunResult interrupt(std::vector<std::string> args, const TempDir& dir, int np, int sig,
                    std::vector<pid_t>& pids,
                    std::vector<std::pair<std::string, std::string>> env = {}) {
  RunSpec spec{std::move(args), std::move(env)};
  spec.during = [&](pid_t chorusrun) {
    pids = wait_for_pids(dir.path(), np);
    ::kill(chorusrun, sig);
  };
  return run_chorusrun(spec);
}

TEST(Chorusrun, SigintStopsEveryWorker) {
  TempDir dir;
  std::vector<pid_t> pids;
  RunResult r = interrupt({"-np", "4", kWorker, "sleep", dir.path()}, dir, 4, SIGINT, pids);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  ASSERT_EQ(pids.size(), 4u);
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "worker " << pid << " left behind";
  EXPECT_NE(r.err.find("interrupted by SIGINT"), std::string::npos) << r.err;
}

TEST(Chorusrun, WorkersIgnoringSigtermAreKilledAfterTheGracePeriod) {
  TempDir dir;
  std::vector<pid_t> pids;
  RunResult r = interrupt({"-np", "2", "--grace-seconds", "0.5", kWorker, "stubborn", dir.path()},
                          dir, 2, SIGTERM, pids);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "worker " << pid << " left behind";
  EXPECT_GE(r.seconds, 0.5);
}

TEST(Chorusrun, StartTimeoutNamesRanksThatDidNotJoin) {
  RunResult r = run({"-np", "3", "--start-timeout", "1", kWorker, "join", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("not joined the rendezvous within the start timeout"), std::string::npos)
      << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(start timeout \(1 s\): 1 \(on localhost\);)")))
      << r.err;
  RunResult ok = run({"-np", "3", "--start-timeout", "5", kWorker, "join", "-1"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(Chorusrun, RestartsTheGroupWithTheNextRestartCount) {
  RunResult failed = run({"-np", "2", kWorker, "flaky"});
  EXPECT_EQ(failed.exit_code, 5);
  RunResult r = run({"-np", "2", "--max-restarts", "2", kWorker, "flaky"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting the job (restart 1 of 2)"), std::string::npos) << r.err;
  EXPECT_EQ(lines_with_prefix(r.out, "[0] restart=1").size(), 1u) << r.out;
  EXPECT_EQ(lines_with_prefix(r.out, "[1] restart=1").size(), 1u) << r.out;
}

TEST(Chorusrun, OversubscribeAllowsMoreRanksThanSlots) {
  RunResult r = run({"-np", "3", "-H", "localhost:2", "--oversubscribe", kWorker, "env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(env_of(r, 2)["CHORUS_LOCAL_SIZE"], "3");
}

TEST(Chorusrun, BadInputExitsWithCode2AndSaysWhy) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"-np", "0", kWorker}, "-np must be a positive"},
      {{"-np", "-2", kWorker}, "-np must be a positive"},
      {{"-np", "two", kWorker}, "-np expects an integer"},
      {{kWorker}, "-np N is required"},
      {{"-np", "2"}, "no program given"},
      {{"-np", "2", "/nonexistent/program"}, "missing or not executable"},
      {{"-np", "2", "no_such_program_xyz"}, "not found in PATH"},
      {{"-np", "3", "-H", "localhost:2", kWorker}, "3 ranks do not fit in 2 slots"},
      {{"-np", "1", "-H", "localhost:0", kWorker}, "slots must be a positive integer"},
      {{"-np", "1", "-H", "a,,b", kWorker}, "malformed host entry"},
      {{"-np", "1", "-H", "bad host:1", kWorker}, "malformed host entry"},
      {{"-np", "1", "-H", "no-such-host.invalid:1", kWorker},
       "unknown host 'no-such-host.invalid'"},
      {{"-np", "1", "--hostfile", "/nonexistent/hosts", kWorker}, "cannot read hostfile"},
      {{"-np", "1", "--frobnicate", kWorker}, "unknown option '--frobnicate'"},
      {{"-np", "2", "-H", "localhost:1,127.0.0.2:1", kWorker},
       "multi-host job needs a shared secret"},
      // Elastic jobs (docs/elastic.md).
      {{"--min-np", "3", "--max-np", "2", kWorker}, "--max-np 2 is below --min-np 3"},
      {{"-np", "5", "--min-np", "2", "--max-np", "4", kWorker},
       "-np 5 must lie within --min-np and --max-np"},
      {{"--min-np", "2", "--mpi", kWorker}, "--mpi is not supported in an elastic job"},
      {{"--min-np", "2", "--max-restarts", "1", kWorker},
       "--max-restarts is not supported in an elastic job"},
      {{"--min-np", "1", "--host-discovery-script", "true", "-H", "localhost:1", kWorker},
       "--host-discovery-script replaces -H"},
      {{"--min-np", "1", "--host-discovery-script", "exit 3", kWorker}, "ended with exit code 3"},
      {{"--min-np", "1", "--host-discovery-script", "echo 'bad host'", kWorker},
       "malformed host entry"},
      {{"-np", "1", "--bind-to", "socket", kWorker}, "--bind-to must be auto, core or none"},
  };
  for (const auto& [args, needle] : cases) {
    RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 2) << needle << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

// `chorusrun ARGS...` with chorusrun itself limited to `cpus` by taskset.
RunSpec under_taskset(const std::vector<int>& cpus, const std::vector<std::string>& args) {
  std::string list;
  for (int c : cpus) list += (list.empty() ? "" : ",") + std::to_string(c);
  RunSpec spec({"-c", list, CHORUSRUN_PATH});
  spec.program = "taskset";
  spec.args.insert(spec.args.end(), args.begin(), args.end());
  return spec;
}

// The cpus each rank of `chorusrun -np NP ARGS... sh -c <print Cpus_allowed_list>` may run
// on, under_taskset(cpus).
std::vector<std::set<int>> cpus_of_ranks(const std::vector<int>& cpus,
                                         std::vector<std::string> args, int np) {
  args.insert(args.begin(), {"-np", std::to_string(np)});
  args.insert(args.end(), {"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"});
  RunResult r = run_chorusrun(under_taskset(cpus, args));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::set<int>> out(np);
  for (int rank = 0; rank < np; ++rank) {
    auto lines = lines_with_prefix(r.out, "[" + std::to_string(rank) + "] Cpus_allowed_list:");
    EXPECT_EQ(lines.size(), 1u) << r.out;
    if (lines.size() != 1) continue;
    std::istringstream in(lines[0].substr(lines[0].find(':') + 1));
    std::string run;
    while (std::getline(in, run, ',')) {  // "0-2" or "5"
      size_t dash = run.find('-');
      int first = std::stoi(run),
          last = dash == std::string::npos ? first : std::stoi(run.substr(dash + 1));
      for (int c = first; c <= last; ++c) out[rank].insert(c);
    }
  }
  return out;
}

TEST(Chorusrun, EachLocalWorkerGetsItsOwnShareOfTheCpus) {
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> two;
  for (int c = 0; c < CPU_SETSIZE && two.size() < 2; ++c) {
    if (CPU_ISSET(c, &set)) two.push_back(c);
  }
  if (two.size() < 2) GTEST_SKIP() << "needs two cpus";
  const std::set<int> both(two.begin(), two.end());
  // By default (auto): one cpu each, together both.
  auto bound = cpus_of_ranks(two, {}, 2);
  EXPECT_EQ(bound[0].size(), 1u);
  EXPECT_EQ(bound[1].size(), 1u);
  std::set<int> together(bound[0]);
  together.insert(bound[1].begin(), bound[1].end());
  EXPECT_EQ(together, both);
  // One worker gets every cpu; --bind-to none and more workers than cpus leave them all.
  EXPECT_EQ(cpus_of_ranks(two, {}, 1)[0], both);
  for (const auto& rank : cpus_of_ranks(two, {"--bind-to", "none"}, 2)) EXPECT_EQ(rank, both);
  for (const auto& rank : cpus_of_ranks(two, {}, 3)) EXPECT_EQ(rank, both);
  // --bind-to core insists.
  RunResult r = run_chorusrun(under_taskset(two, {"--bind-to", "core", "-np", "3", "/bin/true"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--bind-to core: 3 workers on this host but only 2 cpus"), std::string::npos)
      << r.err;
}

TEST(Chorusrun, FourLocalRanksAllreduceOverShmAndTcp) {
  for (const char* transport : {"shm", "tcp"}) {
    SCOPED_TRACE(transport);
    RunResult r = run_chorusrun(
        RunSpec{{"-np", "4", kAllreduce, "--count", "1000003"}, {{"CHORUS_TRANSPORT", transport}}});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    for (int rank = 0; rank < 4; ++rank) {
      std::string id = std::to_string(rank);
      std::string want =
          "[" + id + "] allreduce ok rank " + id + " of 4 local " + id + "/4 cross 0/1";
      EXPECT_EQ(lines_with_prefix(r.out, want).size(), 1u) << want << "\n" << r.out;
    }
  }
}

TEST(Chorusrun, HostfileListsHostsAndSlots) {
  TempDir dir;
  std::ofstream(dir.path() + "/hosts") << "# the only machine\nlocalhost slots=2\n";
  RunResult r = run({"-np", "2", "--hostfile", dir.path() + "/hosts", kWorker, "env"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(env_of(r, 1)["CHORUS_LOCAL_SIZE"], "2");
}

TEST(Chorusrun, AMalformedHostfileExitsWithCode2NamingTheLine) {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"localhost slots=2\nnode1 cpus=4\n", "hosts:2: expected 'host', 'host:N' or 'host slots=N'"},
      {"localhost slots=two\n", "slots must be a positive integer"},
      {"localhost slots=0\n", "slots must be a positive integer"},
      {"# nothing but comments\n\n", "lists no hosts"},
      {"bad host:1\n", "expected 'host', 'host:N' or 'host slots=N'"},
  };
  for (const auto& [text, needle] : cases) {
    std::ofstream(dir.path() + "/hosts") << text;
    RunResult r = run({"-np", "1", "--hostfile", dir.path() + "/hosts", kWorker, "env"});
    EXPECT_EQ(r.exit_code, 2) << text << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << text << "\n" << r.err;
  }
}

}  // namespace
}  // namespace chorus::test
