// ParameterServerStrategy as real processes: the Fashion-MNIST examples with a chief,
// workers and ps tasks started by hand with TF_CONFIG (so the test knows every pid), a
// worker SIGKILLed mid-training (its steps rerun elsewhere, training finishes), a ps
// SIGKILLed (the chief fails with UnavailableError; a restart resumes from the backup),
// the same under `chorusrun --ps --max-restarts 1`, and the custom loop under
// `chorusrun --ps`. Time limits only guard against hangs.
#include <gtest/gtest.h>

#include <filesystem>

#include "process_harness.h"
#include "tools/run_helper.h"

namespace chorus::test {
namespace {

const std::vector<std::string> kData = {"--train-samples", "6000", "--test-samples", "2000",
                                        "--threads",       "1",    "--verbose",      "2"};
// For comparing accuracies: large enough that run-to-run noise of the asynchronous modes
// stays well inside the 2-point bound (seen: +-0.8 points over repeated runs).
const std::vector<std::string> kConvergenceData = {
    "--train-samples", "20000", "--test-samples", "5000", "--threads", "1", "--verbose", "2"};

// A chief, `workers` workers and `num_ps` ps tasks of keras_fashion_mnist on local ports.
class Cluster {
 public:
  Cluster(const std::string& dir, int workers, int num_ps) : dir_(dir) {
    chief_ = address();
    for (int i = 0; i < workers; ++i) workers_.push_back(address());
    for (int i = 0; i < num_ps; ++i) ps_.push_back(address());
  }

  std::string tf_config(const std::string& role, int index) const {
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& a : v) s += (s.empty() ? "\"" : ", \"") + a + "\"";
      return "[" + s + "]";
    };
    return R"({"cluster": {"chief": [")" + chief_ + R"("], "worker": )" + list(workers_) +
           R"(, "ps": )" + list(ps_) + R"(}, "task": {"type": ")" + role + R"(", "index": )" +
           std::to_string(index) + "}}";
  }

  std::string log(const std::string& role, int index) const {
    return dir_ + "/" + role + "." + std::to_string(index) + ".log";
  }

  pid_t start(const std::string& role, int index, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {KERAS_FASHION_MNIST, "--strategy", "ps"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), data.begin(), data.end());
    EnvList env = {{"CHORUS_SECRET", "ps-test-secret"}};
    if (use_flags) {
      argv.insert(argv.end(),
                  {"--ps_hosts", join(ps_), "--worker_hosts", join(workers_), "--chief_host",
                   chief_, "--job_name", role, "--task_index", std::to_string(index)});
    } else {
      env.push_back({"TF_CONFIG", tf_config(role, index)});
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return spawn(argv, env, log(role, index));
  }

  EnvList extra_env;
  std::vector<std::string> data = kData;
  bool use_flags = false;  // --ps_hosts ... --task_index instead of TF_CONFIG

  struct Pids {
    pid_t chief = -1;
    std::vector<pid_t> workers, ps;
  };
  Pids start_all(const std::vector<std::string>& args) {
    Pids p;
    for (size_t i = 0; i < ps_.size(); ++i) p.ps.push_back(start("ps", static_cast<int>(i), args));
    for (size_t i = 0; i < workers_.size(); ++i)
      p.workers.push_back(start("worker", static_cast<int>(i), args));
    p.chief = start("chief", 0, args);
    return p;
  }

 private:
  static std::string join(const std::vector<std::string>& list) {
    std::string s;
    for (const auto& a : list) s += (s.empty() ? "" : ",") + a;
    return s;
  }
  static std::string address() { return "127.0.0.1:" + std::to_string(free_port()); }
  std::string dir_, chief_;
  std::vector<std::string> workers_, ps_;
};

// Waits (bounded) until `path` contains `text`.
bool wait_for_text(const std::string& path, const std::string& text, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (slurp(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

double val_accuracy(const std::string& log) { return number_after(log, "val_accuracy "); }

// The reference: MultiWorkerMirroredStrategy (synchronous allreduce), 2 workers.
double allreduce_accuracy(const std::string& dir, int epochs) {
  const std::string cluster =
      R"({"cluster": {"worker": ["127.0.0.1:)" + std::to_string(free_port()) + R"(", "127.0.0.1:)" +
      std::to_string(free_port()) + R"("]}, "task": {"type": "worker", "index": )";
  std::vector<std::string> argv = {KERAS_FASHION_MNIST, "--epochs", std::to_string(epochs)};
  argv.insert(argv.end(), kConvergenceData.begin(), kConvergenceData.end());
  pid_t w0 = spawn(argv, {{"TF_CONFIG", cluster + "0}}"}}, dir + "/mwms0.log");
  pid_t w1 = spawn(argv, {{"TF_CONFIG", cluster + "1}}"}}, dir + "/mwms1.log");
  EXPECT_EQ(wait_exit(w0, 300s), 0) << slurp(dir + "/mwms0.log");
  EXPECT_EQ(wait_exit(w1, 60s), 0) << slurp(dir + "/mwms1.log");
  return val_accuracy(slurp(dir + "/mwms0.log"));
}

double ps_accuracy(const std::string& dir, const std::string& mode, int num_ps, int epochs) {
  Cluster cluster(dir + "/" + mode, 2, num_ps);
  cluster.data = kConvergenceData;
  std::filesystem::create_directories(dir + "/" + mode);
  auto pids = cluster.start_all(
      {"--epochs", std::to_string(epochs), "--ps-mode", mode, "--staleness", "1"});
  const std::string chief = cluster.log("chief", 0);
  EXPECT_EQ(wait_exit(pids.chief, 300s), 0) << slurp(chief);
  for (pid_t p : pids.workers) EXPECT_EQ(wait_exit(p, 60s), 0) << "a worker";
  for (pid_t p : pids.ps) EXPECT_EQ(wait_exit(p, 60s), 0) << "a ps task";
  EXPECT_NE(slurp(chief).find("ParameterServerStrategy, 2 replica(s)"), std::string::npos)
      << slurp(chief);
  return val_accuracy(slurp(chief));
}

TEST(PsExamplesTest, EveryUpdateModeConvergesLikeSynchronousAllreduce) {
  TempDir dir;
  const int epochs = 2;
  const double reference = allreduce_accuracy(dir.path(), epochs);
  ASSERT_GT(reference, 0.6);
  for (const auto& [mode, num_ps] :
       std::vector<std::pair<std::string, int>>{{"async", 1}, {"sync", 2}, {"ssp", 2}}) {
    const double accuracy = ps_accuracy(dir.path(), mode, num_ps, epochs);
    std::printf("val_accuracy after %d epochs: allreduce %.4f, ps %s (%d ps) %.4f\n", epochs,
                reference, mode.c_str(), num_ps, accuracy);
    // sync is deterministic; async and ssp depend on timing: async with 1 ps gave 0.8206 to
    // 0.8486 against allreduce's 0.8430 over runs on 2026-11-22 (docs/ps.md).
    const double tolerance = mode == "sync" ? 0.02 : 0.035;
    EXPECT_GT(accuracy, reference - tolerance) << mode;
  }
}

TEST(PsExamplesTest, AKilledWorkersStepsRunElsewhereAndItMayRejoin) {
  TempDir dir;
  Cluster cluster(dir.path(), 2, 1);
  cluster.extra_env = {{"CHORUS_LOG_LEVEL", "info"}};  // the coordinator's join lines
  auto pids = cluster.start_all({"--epochs", "3"});
  const std::string chief = cluster.log("chief", 0);
  ASSERT_TRUE(wait_for_text(chief, "epoch 1/3:", 240s)) << slurp(chief);
  ::kill(pids.workers[1], SIGKILL);  // mid-epoch 2
  EXPECT_EQ(wait_exit(pids.workers[1], 10s), 128 + SIGKILL);
  ASSERT_TRUE(wait_for_text(chief, "epoch 2/3:", 240s)) << slurp(chief);
  pid_t rejoined = cluster.start("worker", 1, {"--epochs", "3"});
  EXPECT_EQ(wait_exit(pids.chief, 240s), 0) << slurp(chief);
  EXPECT_EQ(wait_exit(pids.workers[0], 60s), 0);
  EXPECT_EQ(wait_exit(rejoined, 60s), 0) << slurp(cluster.log("worker", 1));
  EXPECT_EQ(wait_exit(pids.ps[0], 60s), 0) << slurp(cluster.log("ps", 0));
  const std::string log = slurp(chief);
  EXPECT_NE(log.find("final:"), std::string::npos) << log;
  EXPECT_GT(val_accuracy(log), 0.6) << log;
  const auto joined = log.find("worker 1 joined");
  ASSERT_NE(joined, std::string::npos) << log;
  EXPECT_NE(log.find("worker 1 joined", joined + 1), std::string::npos) << "rejoined\n" << log;
  // The kill lands mid-step almost always (a step is most of a worker's time); say so.
  std::printf("steps rescheduled after the kill: %s\n",
              log.find("rescheduled on the next idle worker") != std::string::npos
                  ? "yes"
                  : "none in flight");
}

TEST(PsExamplesTest, AKilledPsIsUnavailableAndTheRestartResumesFromTheBackup) {
  TempDir dir;
  const std::string backup = dir.path() + "/backup";
  const std::vector<std::string> args = {"--epochs", "3", "--backup-dir", backup};
  {
    Cluster cluster(dir.path() + "/first", 2, 1);
    std::filesystem::create_directories(dir.path() + "/first");
    auto pids = cluster.start_all(args);
    const std::string chief = cluster.log("chief", 0);
    ASSERT_TRUE(wait_for_text(chief, "BackupAndRestore: saved epoch 0 step 47", 240s))
        << slurp(chief);
    ::kill(pids.ps[0], SIGKILL);  // the only ps
    EXPECT_NE(wait_exit(pids.chief, 120s), 0) << slurp(chief);
    const std::string log = slurp(chief);
    EXPECT_NE(log.find("parameter server 0"), std::string::npos) << log;
    EXPECT_NE(log.find("unavailable"), std::string::npos) << log;
    EXPECT_EQ(log.find("final:"), std::string::npos) << log;
    for (pid_t p : pids.workers) EXPECT_GE(wait_exit(p, 60s), 0) << "a worker exits";
  }
  Cluster again(dir.path() + "/second", 2, 1);
  again.use_flags = true;  // the restarted cluster is described by TF1-style flags
  std::filesystem::create_directories(dir.path() + "/second");
  auto pids = again.start_all(args);
  const std::string chief = again.log("chief", 0);
  EXPECT_EQ(wait_exit(pids.chief, 300s), 0) << slurp(chief);
  for (pid_t p : pids.workers) EXPECT_EQ(wait_exit(p, 60s), 0);
  for (pid_t p : pids.ps) EXPECT_EQ(wait_exit(p, 60s), 0);
  const std::string log = slurp(chief);
  EXPECT_NE(log.find("BackupAndRestore: resuming at epoch 1 step 0"), std::string::npos) << log;
  EXPECT_GT(val_accuracy(log), 0.6) << log;
}

// The pid of a live process whose command line mentions `marker` and whose TF_CONFIG
// makes it a task of `role` (chorusrun started it: the test does not know its pid).
pid_t find_task(const std::string& marker, const std::string& role) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp(entry.path() / "cmdline"),
                environ = slurp(entry.path() / "environ");
    if (cmdline.find(marker) != std::string::npos &&
        environ.find("\"task\": {\"type\": \"" + role + "\"") != std::string::npos) {
      return std::stoi(name);
    }
  }
  return -1;
}

TEST(PsExamplesTest, ChorusrunRestartsTheClusterAfterAPsDiesAndTrainingResumes) {
  TempDir dir;
  const std::string backup = dir.path() + "/backup", logs = dir.path() + "/logs";
  std::filesystem::create_directories(logs);
  std::vector<std::string> args = {"--ps",
                                   "1",
                                   "-np",
                                   "2",
                                   "--max-restarts",
                                   "1",
                                   "--output-dir",
                                   logs,
                                   KERAS_FASHION_MNIST,
                                   "--strategy",
                                   "ps",
                                   "--epochs",
                                   "3",
                                   "--backup-dir",
                                   backup};
  args.insert(args.end(), kData.begin(), kData.end());
  RunSpec spec(args);
  spec.timeout = 300s;
  spec.during = [&](pid_t) {
    if (!wait_for_text(logs + "/chief.log", "BackupAndRestore: saved epoch 0 step 47", 240s))
      return;
    const pid_t ps = find_task(backup, "ps");
    if (ps > 0) ::kill(ps, SIGKILL);
  };
  RunResult r = run_chorusrun(spec);
  const std::string chief = slurp(logs + "/chief.log");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << chief;
  // The launcher ends the attempt as soon as the ps dies (the by-hand test above shows the
  // chief's own UnavailableError) and starts every task again.
  EXPECT_NE((r.out + r.err).find("restarting the job (restart 1 of 1) after: ps 0"),
            std::string::npos)
      << r.out << r.err;
  EXPECT_NE(chief.find("BackupAndRestore: resuming at epoch 1 step 0"), std::string::npos) << chief;
  EXPECT_GT(val_accuracy(chief), 0.6) << chief;
}

TEST(PsExamplesTest, CustomLoopUnderChorusrunPs) {
  RunSpec spec({"--ps", "1", "-np", "2", PS_CUSTOM_LOOP, "--steps", "200", "--train-samples",
                "6000", "--test-samples", "2000"});
  spec.timeout = 240s;
  RunResult r = run_chorusrun(spec);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GT(number_after(r.out, "test accuracy "), 0.6) << r.out;
  EXPECT_NE(r.out.find("2 workers, 1 ps, async"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace chorus::test
