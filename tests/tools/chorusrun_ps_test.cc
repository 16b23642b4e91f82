// `chorusrun --ps K`: a parameter-server cluster of fake_ps_task processes (see that file
// for what each task does). Checks what every task is told (TF_CONFIG, no CHORUS_RANK) and
// the supervision policy: the chief ends the job, workers restart alone, a failed chief or
// ps task restarts the whole cluster.
#include <signal.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "rendezvous/tf_config.h"
#include "run_helper.h"

namespace chorus::test {
namespace {

const std::string kTask = FAKE_PS_TASK_PATH;
const std::string kFakeSsh = FAKE_SSH_PATH;

// Values printed as NAME=VALUE by the task whose output prefix is `label` ("worker 1"), in
// order (a restarted task prints twice).
std::vector<std::string> values_of(const std::string& text, const std::string& label,
                                   const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& line : lines_with_prefix(text, "[" + label + "] " + name + "=")) {
    out.push_back(line.substr(label.size() + 3 + name.size() + 1));
  }
  return out;
}

std::string value_of(const RunResult& r, const std::string& label, const std::string& name) {
  auto all = values_of(r.out, label, name);
  return all.empty() ? "<missing>" : all.back();
}

std::vector<std::string> labels(int workers, int ps) {
  std::vector<std::string> out = {"chief"};
  for (int i = 0; i < workers; ++i) out.push_back("worker " + std::to_string(i));
  for (int i = 0; i < ps; ++i) out.push_back("ps " + std::to_string(i));
  return out;
}

std::vector<pid_t> task_pids(const TempDir& dir, int restart, int workers, int ps) {
  std::vector<pid_t> pids;
  for (const std::string& label : labels(workers, ps)) {
    std::string name =
        label == "chief" ? "chief.0" : std::regex_replace(label, std::regex(" "), ".");
    pids.push_back(read_pid(dir.path() + "/pid." + std::to_string(restart) + "." + name));
  }
  return pids;
}

TEST(ChorusrunPs, EveryTaskGetsTheWholeClusterAndItsOwnTask) {
  TempDir dir;
  // A stray collective-job environment around chorusrun must not reach the tasks.
  RunResult r = run_chorusrun(
      RunSpec{{"--ps", "2", "-np", "3", "-x", "CHORUS_TEST_EXPORT=hi", kTask, dir.path()},
              {{"CHORUS_RANK", "5"}, {"CHORUS_SIZE", "9"}, {"CHORUS_STORE_ADDR", "10.0.0.1:1"}}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  tf_config::Config first = tf_config::parse(value_of(r, "chief", "TF_CONFIG"));
  ASSERT_EQ(first.cluster["chief"].size(), 1u);
  ASSERT_EQ(first.cluster["worker"].size(), 3u);
  ASSERT_EQ(first.cluster["ps"].size(), 2u);
  std::set<std::string> addresses;
  for (const auto& [role, list] : first.cluster) {
    for (const std::string& a : list) {
      EXPECT_EQ(a.rfind("127.0.0.1:", 0), 0u) << a;
      addresses.insert(a);
    }
  }
  EXPECT_EQ(addresses.size(), 6u) << "every task needs a port of its own";
  // Ranks as read_job_env() gives them: chief, then the workers, then the ps tasks.
  int rank = 0;
  for (const std::string& label : labels(3, 2)) {
    SCOPED_TRACE(label);
    tf_config::Config c = tf_config::parse(value_of(r, label, "TF_CONFIG"));
    EXPECT_EQ(c.cluster, first.cluster);
    std::string role = label.substr(0, label.find(' '));
    int index = label == "chief" ? 0 : std::stoi(label.substr(label.find(' ') + 1));
    EXPECT_EQ(c.task_type, role);
    EXPECT_EQ(c.task_index, index);
    EXPECT_EQ(value_of(r, label, "job"),
              "tf_config " + std::to_string(rank++) + "/6 " + role + " " + std::to_string(index));
    EXPECT_EQ(value_of(r, label, "CHORUS_RANK"), "");
    EXPECT_EQ(value_of(r, label, "CHORUS_SIZE"), "");
    EXPECT_EQ(value_of(r, label, "CHORUS_STORE_ADDR"), "");
    EXPECT_EQ(value_of(r, label, "CHORUS_RESTART_COUNT"), "0");
    EXPECT_EQ(value_of(r, label, "CHORUS_SECRET"), "");
    EXPECT_EQ(value_of(r, label, "secret_file_mode"), "600");
    EXPECT_EQ(value_of(r, label, "CHORUS_TEST_EXPORT"), "hi");
    // The others end on their own once the chief is done: no SIGTERM needed.
    if (label != "chief") {
      EXPECT_EQ(lines_with_prefix(r.out, "[" + label + "] left on my own").size(), 1u);
    }
  }
}

TEST(ChorusrunPs, OutputDirHoldsOneLogPerTask) {
  TempDir dir, logs;
  RunResult r = run_chorusrun(
      RunSpec{{"--ps", "1", "-np", "2", "--output-dir", logs.path(), kTask, dir.path()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("TF_CONFIG"), std::string::npos);
  const std::pair<std::string, std::string> files[] = {{"chief.log", "chief"},
                                                       {"worker.0.log", "worker"},
                                                       {"worker.1.log", "worker"},
                                                       {"ps.0.log", "ps"}};
  for (const auto& [file, role] : files) {
    std::ifstream log(logs.path() + "/" + file);
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"task\": {\"type\": \"" + role + "\""), std::string::npos)
        << file << ": " << text;
  }
}

TEST(ChorusrunPs, ChiefSuccessStopsLingeringTasksAfterTheGracePeriod) {
  TempDir dir;
  RunResult r = run_chorusrun(
      RunSpec{{"--ps", "2", "-np", "2", "--grace-seconds", "0.3", kTask, dir.path(), "--linger"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(r.seconds, 0.3) << "the tasks get the grace period to end on their own first";
  for (pid_t pid : task_pids(dir, 0, 2, 2))
    EXPECT_FALSE(process_alive(pid)) << pid << " left behind";
  EXPECT_EQ(r.out.find("left on my own"), std::string::npos);
}

TEST(ChorusrunPs, FailedWorkerIsRestartedAloneWithTheSameTfConfig) {
  TempDir dir;
  RunResult r = run_chorusrun(
      RunSpec{{"--ps", "1", "-np", "2", kTask, dir.path(), "--crash-once", "worker:1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(worker 1 on localhost \(pid \d+\) ended with exit code 3; )"
                        R"(restarting it \(worker restart 1 of 3\))")))
      << r.err;
  auto configs = values_of(r.out, "worker 1", "TF_CONFIG");
  ASSERT_EQ(configs.size(), 2u) << r.out;
  EXPECT_EQ(configs[0], configs[1]);
  for (const char* other : {"chief", "worker 0", "ps 0"}) {
    EXPECT_EQ(values_of(r.out, other, "TF_CONFIG").size(), 1u) << other << " was restarted too";
  }
  EXPECT_EQ(r.err.find("restarting the job"), std::string::npos) << r.err;
}

TEST(ChorusrunPs, WorkerWithoutRestartsLeftIsLeftOut) {
  TempDir dir;
  RunResult r = run_chorusrun(RunSpec{{"--ps", "1", "-np", "2", "--worker-restarts", "1", kTask,
                                       dir.path(), "--crash", "worker:0", "--crashes", "2"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("restarting it (worker restart 1 of 1)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the job continues without it (--worker-restarts 1 used up)"),
            std::string::npos)
      << r.err;
  // With no worker left the cluster cannot make progress: the attempt fails.
  TempDir lone_dir;
  RunResult lone =
      run_chorusrun(RunSpec{{"--ps", "1", "-np", "1", "--worker-restarts", "0", kTask,
                             lone_dir.path(), "--crash", "worker:0", "--chief-stays"}});
  EXPECT_EQ(lone.exit_code, 3) << lone.err;
  EXPECT_NE(lone.err.find("no worker is left"), std::string::npos) << lone.err;
}

TEST(ChorusrunPs, FailedPsTaskRestartsTheWholeCluster) {
  TempDir dir;
  RunResult r = run_chorusrun(RunSpec{
      {"--ps", "2", "-np", "2", "--max-restarts", "1", kTask, dir.path(), "--crash-once", "ps:1"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(R"(ps 1 on localhost \(pid \d+\) ended with exit code 3; stopping the cluster)")))
      << r.err;
  EXPECT_NE(r.err.find("restarting the job (restart 1 of 1)"), std::string::npos) << r.err;
  // The other tasks of attempt 0 may be stopped before they print anything.
  EXPECT_EQ(values_of(r.out, "ps 1", "CHORUS_RESTART_COUNT"), (std::vector<std::string>{"0", "1"}));
  for (const std::string& label : labels(2, 2)) {
    EXPECT_EQ(value_of(r, label, "CHORUS_RESTART_COUNT"), "1") << label;
  }
  for (pid_t pid : task_pids(dir, 0, 2, 1))
    EXPECT_FALSE(process_alive(pid)) << pid << " left behind";
}

TEST(ChorusrunPs, FailedChiefEndsTheJobWithItsExitCode) {
  TempDir dir;
  RunResult r = run_chorusrun(
      RunSpec{{"--ps", "1", "-np", "2", kTask, dir.path(), "--linger", "--chief-exit", "4"}});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(R"(chief on localhost \(pid \d+\) ended with exit code 4; stopping the cluster)")))
      << r.err;
  EXPECT_NE(r.err.find("job failed"), std::string::npos) << r.err;
  for (pid_t pid : task_pids(dir, 0, 2, 1))
    EXPECT_FALSE(process_alive(pid)) << pid << " left behind";
}

TEST(ChorusrunPs, SigintStopsEveryTask) {
  TempDir dir;
  std::vector<pid_t> pids;
  RunSpec spec{{"--ps", "1", "-np", "2", kTask, dir.path(), "--chief-stays"}};
  spec.during = [&](pid_t chorusrun) {
    for (const char* name : {"chief.0", "worker.0", "worker.1", "ps.0"}) {
      if (!wait_for_file(dir.path() + "/pid.0." + name, std::chrono::seconds(10))) return;
    }
    pids = task_pids(dir, 0, 2, 1);
    ::kill(chorusrun, SIGINT);
  };
  RunResult r = run_chorusrun(spec);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  ASSERT_EQ(pids.size(), 4u) << r.err;
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << pid << " left behind";
  EXPECT_NE(r.err.find("stopped every task (interrupted by SIGINT)"), std::string::npos) << r.err;
}

// Slot order chief, ps, workers: here the chief and ps 0 fill localhost's two slots and the
// workers go to the "remote" host (fake_ssh), at --ps-port-base + their slot position.
TEST(ChorusrunPs, RemoteTasksListenAtThePortBasePlusTheirPosition) {
  TempDir dir;
  RunResult r =
      run_chorusrun(RunSpec{{"--ps", "1", "-np", "2", "-H", "localhost:2,127.0.0.2:2", "--rsh",
                             kFakeSsh, "--ps-port-base", "31000", kTask, dir.path()},
                            {{"CHORUS_SECRET", "test-secret-0123456789"}, {"CHORUS_RANK", "1"}}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  tf_config::Config c = tf_config::parse(value_of(r, "worker 1", "TF_CONFIG"));
  EXPECT_EQ(c.cluster["worker"], (std::vector<std::string>{"127.0.0.2:31002", "127.0.0.2:31003"}));
  EXPECT_EQ(c.cluster["chief"][0].rfind("127.0.0.1:", 0), 0u) << c.cluster["chief"][0];
  EXPECT_NE(c.cluster["chief"][0], c.cluster["ps"][0]);
  for (const std::string& label : labels(2, 1)) {
    EXPECT_EQ(value_of(r, label, "CHORUS_RANK"), "") << label;
    EXPECT_EQ(value_of(r, label, "secret_file_mode"), "600") << label;
  }
  EXPECT_EQ(value_of(r, "worker 0", "CHORUS_HOST_ID"), "127.0.0.2");
  EXPECT_EQ(value_of(r, "ps 0", "CHORUS_HOST_ID"), "localhost");
}

TEST(ChorusrunPs, BadInputExitsWithCode2AndSaysWhy) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--ps", "0", "-np", "2", kTask}, "--ps must be a positive number of ps tasks, got 0"},
      {{"--ps", "-1", "-np", "2", kTask}, "--ps must be a positive number of ps tasks, got -1"},
      {{"--ps", "x", "-np", "2", kTask}, "--ps expects an integer"},
      {{"--ps", "1", "-np", "0", kTask}, "-np must be a positive number of workers, got 0"},
      {{"--ps", "1", "-np", "2", "--mpi", kTask}, "--mpi is not supported with --ps"},
      {{"--ps", "1", "-np", "2", "--start-timeout", "5", kTask},
       "--start-timeout is not supported with --ps"},
      {{"--ps", "1", "-np", "2", "--worker-restarts", "-1", kTask},
       "--worker-restarts must not be negative"},
      {{"--ps", "1", "-np", "2", "--ps-port-base", "65534", kTask}, "leaves no room"},
      {{"--ps", "2", "-np", "2", "-H", "localhost:4", kTask}, "5 tasks do not fit in 4 slots"},
  };
  for (const auto& [args, needle] : cases) {
    RunResult r = run_chorusrun(RunSpec{args});
    EXPECT_EQ(r.exit_code, 2) << needle << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace chorus::test
