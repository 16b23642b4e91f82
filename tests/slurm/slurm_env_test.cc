// A Slurm step's ranks meeting without any address given, and chorusrun inside a Slurm
// allocation — with the variables srun / salloc would set, so no Slurm needs to run (the
// real Slurm is run_slurm_test.sh's). The ranks are real processes (allreduce_worker, a
// chorus::Job) on this host.
#include <gtest/gtest.h>
#include <unistd.h>

#include <future>
#include <random>
#include <string>

#include "run_helper.h"

namespace chorus::test {
namespace {

const char* const kLauncherVariables[] = {"CHORUS_RANK",
                                          "CHORUS_SIZE",
                                          "CHORUS_STORE_ADDR",
                                          "CHORUS_SECRET",
                                          "CHORUS_SECRET_FILE",
                                          "CHORUS_LAUNCHER",
                                          "CHORUS_STORE_PORT",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "RANK",
                                          "OMPI_COMM_WORLD_RANK",
                                          "TF_CONFIG",
                                          "SLURM_JOB_ID",
                                          "SLURM_STEP_ID",
                                          "SLURM_PROCID",
                                          "SLURM_JOB_NODELIST",
                                          "SLURM_NODELIST",
                                          "SLURM_TASKS_PER_NODE",
                                          "SLURM_JOB_CPUS_PER_NODE"};

// A job id of our own: the derived port and the secret's file name follow from it.
uint32_t fresh_job_id() {
  std::random_device rd;
  return 100000 + rd() % 1000000;
}

// Task `rank` of step 0 of `job`: `ntasks` tasks on the nodes of `nodes`, `tasks` per node.
RunSpec slurm_task(uint32_t job, int rank, int ntasks, const std::string& nodes,
                   const std::string& tasks, int node, int local) {
  RunSpec spec({"--count", "1000", "--iterations", "2"}, {{"SLURM_JOB_ID", std::to_string(job)},
                                                          {"SLURM_STEP_ID", "0"},
                                                          {"SLURM_PROCID", std::to_string(rank)},
                                                          {"SLURM_NTASKS", std::to_string(ntasks)},
                                                          {"SLURM_STEP_NODELIST", nodes},
                                                          {"SLURM_STEP_TASKS_PER_NODE", tasks},
                                                          {"SLURM_NODEID", std::to_string(node)},
                                                          {"SLURM_LOCALID", std::to_string(local)},
                                                          {"CHORUS_TIMEOUT_SECONDS", "20"}});
  spec.program = ALLREDUCE_WORKER_PATH;
  spec.unset.assign(std::begin(kLauncherVariables), std::end(kLauncherVariables));
  return spec;
}

TEST(SlurmStep, TwoTasksOnOneNodeMeetWithoutAnyAddress) {
  uint32_t job = fresh_job_id();
  auto rank1 = std::async(std::launch::async,
                          [&] { return run_chorusrun(slurm_task(job, 1, 2, "node7", "2", 0, 1)); });
  RunResult rank0 = run_chorusrun(slurm_task(job, 0, 2, "node7", "2", 0, 0));
  RunResult other = rank1.get();
  EXPECT_EQ(rank0.exit_code, 0) << rank0.out << rank0.err;
  EXPECT_EQ(other.exit_code, 0) << other.out << other.err;
  EXPECT_NE(rank0.out.find("allreduce ok rank 0 of 2 local 0/2 cross 0/1"), std::string::npos)
      << rank0.out;
  EXPECT_NE(other.out.find("allreduce ok rank 1 of 2 local 1/2 cross 0/1"), std::string::npos)
      << other.out;
  // The secret the two shared through the user's private directory is gone.
  std::string file =
      "/tmp/chorus-" + std::to_string(::getuid()) + "/secret-slurm-" + std::to_string(job) + ".0";
  EXPECT_NE(::access(file.c_str(), F_OK), 0) << file << " was left behind";
}

TEST(SlurmStep, AcrossNodesWithoutASecretFailsNamingWhatToSet) {
  // Rank 1 on the second of two nodes (numeric names: no name service needed).
  RunResult r = run_chorusrun(slurm_task(fresh_job_id(), 1, 2, "10.9.8.[7-8]", "1(x2)", 1, 0));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("InvalidArgument"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a Slurm step across 2 nodes needs the job secret: export "
                       "CHORUS_SECRET_FILE"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 10) << "it should fail at once, not after a timeout";
}

TEST(SlurmStep, MoreTasksThanTheStepsSlotsIsInvalid) {
  RunResult r = run_chorusrun(slurm_task(fresh_job_id(), 1, 4, "node7", "2", 0, 1));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("InvalidArgument"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the Slurm step has 2 task slot(s) (SLURM_STEP_TASKS_PER_NODE=2) but "
                       "SLURM_NTASKS=4"),
            std::string::npos)
      << r.err;
}

// chorusrun in an allocation of one node (this host) with `slots` task slots.
RunSpec in_allocation(const std::string& slots, std::vector<std::string> args) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  RunSpec spec(
      std::move(args),
      {{"SLURM_JOB_ID", "77"}, {"SLURM_JOB_NODELIST", host}, {"SLURM_TASKS_PER_NODE", slots}});
  spec.unset.assign(std::begin(kLauncherVariables), std::end(kLauncherVariables));
  return spec;
}

TEST(ChorusrunInSlurm, MoreRanksThanTheAllocationsSlotsIsBadInput) {
  RunResult r = run_chorusrun(in_allocation("2", {"-np", "3", FAKE_WORKER_PATH, "env"}));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("3 ranks do not fit in the 2 task slot(s) of Slurm allocation 77 "
                       "(SLURM_JOB_NODELIST="),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("salloc/sbatch -n 3"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // nothing started
}

TEST(ChorusrunInSlurm, RanksFillTheAllocation) {
  RunResult r = run_chorusrun(in_allocation("2", {"-np", "2", FAKE_WORKER_PATH, "env"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(env_of(r, 1)["CHORUS_SIZE"], "2");
  EXPECT_EQ(env_of(r, 1)["CHORUS_LOCAL_SIZE"], "2");
  // --oversubscribe and -H still decide.
  EXPECT_EQ(
      run_chorusrun(in_allocation("2", {"--oversubscribe", "-np", "3", FAKE_WORKER_PATH, "env"}))
          .exit_code,
      0);
  EXPECT_EQ(
      run_chorusrun(in_allocation("2", {"-H", "localhost:3", "-np", "3", FAKE_WORKER_PATH, "env"}))
          .exit_code,
      0);
}

TEST(ChorusrunInSlurm, MalformedAllocationIsBadInput) {
  RunResult r = run_chorusrun(in_allocation("2(x2)", {"-np", "2", FAKE_WORKER_PATH, "env"}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("SLURM_TASKS_PER_NODE=2(x2) gives 2 node(s) but the node list names 1"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace chorus::test
