#include "rendezvous/job_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "chorus/error.h"

namespace chorus {
namespace {

const char* const kAllVariables[] = {"CHORUS_RANK",
                                     "CHORUS_SIZE",
                                     "CHORUS_LOCAL_RANK",
                                     "CHORUS_LOCAL_SIZE",
                                     "CHORUS_CROSS_RANK",
                                     "CHORUS_CROSS_SIZE",
                                     "CHORUS_STORE_ADDR",
                                     "CHORUS_RESTART_COUNT",
                                     "CHORUS_SECRET",
                                     "CHORUS_SECRET_FILE",
                                     "CHORUS_LAUNCHER",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE",
                                     "GROUP_RANK",
                                     "GROUP_WORLD_SIZE",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "TORCHELASTIC_USE_AGENT_STORE",
                                     "TORCHELASTIC_RESTART_COUNT",
                                     "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "OMPI_COMM_WORLD_LOCAL_SIZE",
                                     "SLURM_PROCID",
                                     "SLURM_NTASKS",
                                     "SLURM_NPROCS",
                                     "SLURM_LOCALID",
                                     "SLURM_NODEID",
                                     "SLURM_NNODES",
                                     "SLURM_JOB_ID",
                                     "SLURM_STEP_ID",
                                     "SLURM_STEPID",
                                     "SLURM_STEP_NODELIST",
                                     "SLURM_JOB_NODELIST",
                                     "SLURM_NODELIST",
                                     "SLURM_STEP_TASKS_PER_NODE",
                                     "SLURM_TASKS_PER_NODE",
                                     "SLURMD_NODENAME",
                                     "CHORUS_STORE_PORT",
                                     "TF_CONFIG"};

class JobEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* name : kAllVariables) unsetenv(name);
  }
  static void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

  // Expects read_job_env() to throw InvalidArgument whose message contains `needle`.
  static void expect_invalid(const std::string& needle) {
    try {
      read_job_env();
      FAIL() << "no exception; expected one mentioning " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
};

TEST_F(JobEnvTest, NothingSetIsASingleProcessJob) {
  JobEnv env = read_job_env();
  EXPECT_EQ(env.source, "single");
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.size, 1);
  EXPECT_FALSE(env.store.has_value());
  EXPECT_FALSE(env.secret.has_value());
}

TEST_F(JobEnvTest, Chorusrun) {
  set("CHORUS_RANK", "3");
  set("CHORUS_SIZE", "4");
  set("CHORUS_LOCAL_RANK", "1");
  set("CHORUS_LOCAL_SIZE", "2");
  set("CHORUS_CROSS_RANK", "1");
  set("CHORUS_CROSS_SIZE", "2");
  set("CHORUS_STORE_ADDR", "10.0.0.1:29400");
  set("CHORUS_RESTART_COUNT", "2");
  set("CHORUS_SECRET", "s3cret");
  JobEnv env = read_job_env();
  EXPECT_EQ(env.source, "chorus");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 2);
  EXPECT_EQ(env.cross_rank, 1);
  EXPECT_EQ(env.cross_size, 2);
  ASSERT_TRUE(env.store.has_value());
  EXPECT_EQ(env.store->host, "10.0.0.1");
  EXPECT_EQ(env.store->port, 29400);
  EXPECT_FALSE(env.rank0_hosts_store);
  EXPECT_EQ(env.restart_count, 2);
  ASSERT_TRUE(env.secret.has_value());
  EXPECT_EQ(env.secret->bytes(), "s3cret");
}

TEST_F(JobEnvTest, ChorusrunErrorsNameTheVariable) {
  set("CHORUS_RANK", "4");
  set("CHORUS_SIZE", "4");
  set("CHORUS_STORE_ADDR", "h:1");
  expect_invalid("CHORUS_RANK=4 is not below CHORUS_SIZE=4");
  set("CHORUS_RANK", "-1");
  expect_invalid("CHORUS_RANK=-1 is out of range");
  set("CHORUS_RANK", "x");
  expect_invalid("CHORUS_RANK='x' is not an integer");
  set("CHORUS_RANK", "0");
  set("CHORUS_SIZE", "0");
  expect_invalid("CHORUS_SIZE=0 is out of range");
  set("CHORUS_SIZE", "2");
  set("CHORUS_STORE_ADDR", "nohostport");
  expect_invalid("CHORUS_STORE_ADDR");
  unsetenv("CHORUS_STORE_ADDR");
  expect_invalid("CHORUS_STORE_ADDR");
  set("CHORUS_STORE_ADDR", "h:1");
  set("CHORUS_LOCAL_RANK", "2");
  set("CHORUS_LOCAL_SIZE", "2");
  expect_invalid("local rank");
  set("CHORUS_LOCAL_RANK", "0");
  set("CHORUS_LOCAL_SIZE", "3");
  expect_invalid("local size 3 is larger than the job's size 2");
}

TEST_F(JobEnvTest, Torchrun) {
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "2");
  set("MASTER_ADDR", "node0");
  set("MASTER_PORT", "29500");
  set("TORCHELASTIC_RESTART_COUNT", "1");
  JobEnv env = read_job_env();
  EXPECT_EQ(env.source, "torchrun");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.size, 2);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 2);
  ASSERT_TRUE(env.store.has_value());
  EXPECT_EQ(env.store->to_string(), "node0:29500");
  EXPECT_TRUE(env.rank0_hosts_store);
  EXPECT_EQ(env.restart_count, 1);
  // torchrun's agent already serves a store on MASTER_PORT: ours moves to the next port.
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  EXPECT_EQ(read_job_env().store->port, 29501);
}

TEST_F(JobEnvTest, TorchrunNeedsMasterAddress) {
  set("RANK", "0");
  set("WORLD_SIZE", "2");
  expect_invalid("MASTER_ADDR and MASTER_PORT");
  set("MASTER_ADDR", "node0");
  expect_invalid("MASTER_ADDR and MASTER_PORT must be set together");
  set("MASTER_PORT", "70000");
  expect_invalid("MASTER_PORT");
  set("MASTER_PORT", "1234");
  set("RANK", "2");
  expect_invalid("RANK=2 is not below WORLD_SIZE=2");
}

TEST_F(JobEnvTest, OpenMpiWithChorusStoreOrMaster) {
  set("OMPI_COMM_WORLD_RANK", "1");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  JobEnv env = read_job_env();  // bare mpirun: rank 0 offers a store over MPI
  EXPECT_TRUE(env.meet_through_mpi);
  EXPECT_FALSE(env.store.has_value());
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "4000");
  env = read_job_env();
  EXPECT_FALSE(env.meet_through_mpi);
  EXPECT_EQ(env.source, "openmpi");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_TRUE(env.rank0_hosts_store);
  set("CHORUS_STORE_ADDR", "127.0.0.1:5000");  // chorusrun --mpi: the launcher's store
  env = read_job_env();
  EXPECT_EQ(env.store->port, 5000);
  EXPECT_FALSE(env.rank0_hosts_store);
  set("OMPI_COMM_WORLD_RANK", "7");
  expect_invalid("OMPI_COMM_WORLD_RANK=7 is not below OMPI_COMM_WORLD_SIZE=2");
}

// What srun sets for task `rank` of a step of job 4242 over `nodes` (a host list) with
// `tasks` per node (Slurm's syntax), block distribution.
void set_slurm_task(int rank, int ntasks, const std::string& nodes, const std::string& tasks,
                    int node, int local) {
  setenv("SLURM_JOB_ID", "4242", 1);
  setenv("SLURM_STEP_ID", "3", 1);
  setenv("SLURM_PROCID", std::to_string(rank).c_str(), 1);
  setenv("SLURM_NTASKS", std::to_string(ntasks).c_str(), 1);
  setenv("SLURM_STEP_NODELIST", nodes.c_str(), 1);
  setenv("SLURM_JOB_NODELIST", nodes.c_str(), 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", tasks.c_str(), 1);
  setenv("SLURM_NODEID", std::to_string(node).c_str(), 1);
  setenv("SLURM_LOCALID", std::to_string(local).c_str(), 1);
}

TEST_F(JobEnvTest, SlurmStepOnOneNodeMeetsOnLoopbackAtTheDerivedPort) {
  set_slurm_task(1, 2, "vm", "2", 0, 1);
  JobEnv env = read_job_env();
  EXPECT_EQ(env.source, "slurm");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.size, 2);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 2);
  EXPECT_EQ(env.cross_rank, 0);
  EXPECT_EQ(env.cross_size, 1);
  ASSERT_TRUE(env.store.has_value());
  EXPECT_EQ(env.store->host, "127.0.0.1");
  EXPECT_EQ(env.store->port, 20000 + (4242 * 97 + 3) % 10000);
  EXPECT_TRUE(env.rank0_hosts_store);
  EXPECT_EQ(env.job_id, "slurm-4242.3");
}

TEST_F(JobEnvTest, SlurmStepAcrossNodesMeetsAtTheFirstNode) {
  // Numeric "names" resolve without a name service.
  set_slurm_task(3, 4, "10.9.8.[7-8]", "2(x2)", 1, 1);
  set("SLURM_NNODES", "5");  // the allocation's: the step's node list wins
  JobEnv env = read_job_env();
  EXPECT_EQ(env.source, "slurm");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_size, 2);
  EXPECT_EQ(env.cross_rank, 1);
  EXPECT_EQ(env.cross_size, 2);
  ASSERT_TRUE(env.store.has_value());
  EXPECT_EQ(env.store->host, "10.9.8.7");
  EXPECT_EQ(env.store->port, 20000 + (4242 * 97 + 3) % 10000);
  EXPECT_TRUE(env.rank0_hosts_store);
}

TEST_F(JobEnvTest, SlurmStorePortAndHostOverrides) {
  set_slurm_task(0, 4, "10.9.8.[7-8]", "2(x2)", 0, 0);
  set("MASTER_PORT", "29500");
  EXPECT_EQ(read_job_env().store->port, 29500);
  set("CHORUS_STORE_PORT", "31000");  // the more specific one wins
  EXPECT_EQ(read_job_env().store->port, 31000);
  unsetenv("MASTER_PORT");
  set("MASTER_ADDR", "10.1.1.1");  // alone: the derived (or given) port with this host
  JobEnv env = read_job_env();
  EXPECT_EQ(env.store->to_string(), "10.1.1.1:31000");
  EXPECT_TRUE(env.rank0_hosts_store);
  set("CHORUS_STORE_ADDR", "login1:7000");  // a store someone else runs
  env = read_job_env();
  EXPECT_EQ(env.store->to_string(), "login1:7000");
  EXPECT_FALSE(env.rank0_hosts_store);
  unsetenv("CHORUS_STORE_ADDR");
  set("CHORUS_STORE_PORT", "70000");
  expect_invalid("CHORUS_STORE_PORT=70000 is out of range");
  set("CHORUS_STORE_PORT", "0");
  expect_invalid("CHORUS_STORE_PORT=0 is out of range");
}

TEST_F(JobEnvTest, SlurmOutsideAStepIsASingleProcess) {
  // A batch script (or salloc's shell) has the allocation's variables but no step id.
  set_slurm_task(0, 4, "10.9.8.[7-8]", "2(x2)", 0, 0);
  unsetenv("SLURM_STEP_ID");
  JobEnv env = read_job_env();
  EXPECT_EQ(env.source, "single");
  EXPECT_EQ(env.size, 1);
  EXPECT_FALSE(env.store.has_value());
  set("SLURM_STEPID", "0");  // older Slurm's name for the step id
  EXPECT_EQ(read_job_env().source, "slurm");
}

TEST_F(JobEnvTest, SlurmOneTaskStepNeedsNoStore) {
  set_slurm_task(0, 1, "node7", "1", 0, 0);
  JobEnv env = read_job_env();
  EXPECT_EQ(env.source, "slurm");
  EXPECT_EQ(env.size, 1);
  EXPECT_FALSE(env.store.has_value());
}

TEST_F(JobEnvTest, SlurmBadIdsAndListsNameTheVariable) {
  set_slurm_task(1, 4, "10.9.8.[7-8]", "2(x2)", 0, 1);
  set("SLURM_JOB_ID", "-1");
  expect_invalid("SLURM_JOB_ID=-1 is out of range");
  set("SLURM_JOB_ID", "4294967296");
  expect_invalid("SLURM_JOB_ID=4294967296 is out of range");
  set("SLURM_JOB_ID", "4294967295");
  EXPECT_EQ(read_job_env().job_id, "slurm-4294967295.3");
  set("SLURM_STEP_ID", "x");
  expect_invalid("SLURM_STEP_ID='x' is not an integer");
  set("SLURM_STEP_ID", "0");
  set("SLURM_STEP_NODELIST", "node[1-2");
  expect_invalid("SLURM_STEP_NODELIST='node[1-2' is not a valid Slurm host list: unclosed '['");
  set("SLURM_STEP_NODELIST", "10.9.8.[7-8]");
  set("SLURM_STEP_TASKS_PER_NODE", "2(x2");
  expect_invalid("SLURM_STEP_TASKS_PER_NODE='2(x2' is not a valid Slurm tasks-per-node list");
  set("SLURM_STEP_TASKS_PER_NODE", "1(x3)");
  expect_invalid("SLURM_STEP_TASKS_PER_NODE gives 3 node(s) but SLURM_STEP_NODELIST names 2");
}

TEST_F(JobEnvTest, SlurmTasksBeyondTheStepsSlotsAreRefused) {
  set_slurm_task(1, 4, "10.9.8.[7-8]", "1(x2)", 0, 0);
  expect_invalid(
      "the Slurm step has 2 task slot(s) (SLURM_STEP_TASKS_PER_NODE=1(x2)) but SLURM_NTASKS=4");
  set_slurm_task(1, 2, "10.9.8.7", "2", 0, 2);
  expect_invalid("local rank=2 is not below local size=2");
  set_slurm_task(1, 2, "10.9.8.7", "2", 1, 0);
  expect_invalid("cross rank=1 is not below cross size=1");
}

TEST_F(JobEnvTest, SlurmRankZeroMustBeOnTheFirstNodeAndReachable) {
  set_slurm_task(0, 4, "10.9.8.[7-8]", "2(x2)", 0, 0);
  set("SLURMD_NODENAME", "10.9.8.8");
  expect_invalid(
      "rank 0 runs on node 10.9.8.8 but the first node of SLURM_STEP_NODELIST is 10.9.8.7");
  set("SLURMD_NODENAME", "10.9.8.7");
  EXPECT_EQ(read_job_env().store->host, "10.9.8.7");
  // Debian maps a host's own name to 127.0.1.1: no other node could reach that.
  set_slurm_task(2, 4, "localhost,10.9.8.8", "2(x2)", 1, 0);
  expect_invalid("Slurm node localhost (rank 0's) resolves to 127.0.0.1, a loopback address");
  set_slurm_task(2, 4, "no-such-node.invalid,10.9.8.8", "2(x2)", 1, 0);
  expect_invalid(
      "cannot resolve Slurm node (rank 0's, the first in SLURM_STEP_NODELIST) "
      "'no-such-node.invalid'");
}

TEST_F(JobEnvTest, TfConfigRanksChiefFirstThenWorkersThenPs) {
  const std::string cluster =
      R"({"cluster": {"worker": ["a:2001", "b:2002"], "chief": ["a:2000"], "ps": ["c:3000"]},)";
  set("TF_CONFIG", cluster + R"( "task": {"type": "worker", "index": 1}})");
  JobEnv env = read_job_env();
  EXPECT_EQ(env.source, "tf_config");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.size, 4);
  EXPECT_EQ(env.role, "worker");
  EXPECT_EQ(env.task_index, 1);
  EXPECT_EQ(env.store->to_string(), "a:2000");
  EXPECT_TRUE(env.rank0_hosts_store);
  EXPECT_EQ(env.local_rank, 0);  // alone on host b
  EXPECT_EQ(env.local_size, 1);
  EXPECT_EQ(env.cross_rank, 1);
  EXPECT_EQ(env.cross_size, 3);
  set("TF_CONFIG", cluster + R"( "task": {"type": "worker", "index": 0}})");
  env = read_job_env();
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.local_rank, 1);  // after the chief on host a
  EXPECT_EQ(env.local_size, 2);
  set("TF_CONFIG", cluster + R"( "task": {"type": "ps", "index": 0}})");
  env = read_job_env();
  EXPECT_EQ(env.role, "ps");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.cluster.at("ps").size(), 1u);
}

TEST_F(JobEnvTest, TfConfigWithoutChiefUsesWorkerZero) {
  set("TF_CONFIG",
      R"({"cluster":{"worker":["w0:1\u0030", "w1:11"]},"task":{"type":"worker","index":0}})");
  JobEnv env = read_job_env();
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.size, 2);
  EXPECT_EQ(env.store->to_string(), "w0:10");  // \u0030 is '0'
}

TEST_F(JobEnvTest, TfConfigMalformed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0},})",
       "malformed JSON"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}} x)",
       "unexpected text after"},
      {R"({"cluster": {"worker": ["a:1"]}, "cluster": {}, "task": {}})", "duplicate key"},
      {R"({"cluster": {"worker": ["a:1]}, "task": {"type": "worker"}})", "malformed JSON"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}})",
       "task.index 1 is not below the number of worker tasks (1)"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}})",
       "task.type 'ps' is not a role of the cluster"},
      {R"({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}})",
       "cluster.worker must be a list"},
      {R"({"cluster": {"boss": ["a:1"]}, "task": {"type": "worker", "index": 0}})",
       "unknown role 'boss'"},
      {R"({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}})", "TF_CONFIG: "},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})",
       "task.index must be a non-negative integer"},
      {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
       "]]]]]]]]]]]]]]]]]]]]]]]]",
       "nested too deeply"},
      {"  ", "unexpected end of input"},
  };
  for (const auto& [json, needle] : cases) {
    set("TF_CONFIG", json);
    SCOPED_TRACE(json);
    expect_invalid(needle);
  }
}

TEST_F(JobEnvTest, PrecedenceChorusThenMpiThenTorchrunThenTfConfigThenSlurm) {
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "1");
  set("SLURM_JOB_ID", "7");
  set("SLURM_STEP_ID", "0");
  EXPECT_EQ(read_job_env().source, "slurm");
  set("TF_CONFIG", R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0}})");
  EXPECT_EQ(read_job_env().source, "tf_config");
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  EXPECT_EQ(read_job_env().source, "torchrun");
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "1");
  EXPECT_EQ(read_job_env().source, "openmpi");
  set("CHORUS_RANK", "0");
  set("CHORUS_SIZE", "1");
  EXPECT_EQ(read_job_env().source, "chorus");
  set("CHORUS_LAUNCHER", "slurm");
  EXPECT_EQ(read_job_env().source, "slurm");
  set("CHORUS_LAUNCHER", "pbs");
  expect_invalid("CHORUS_LAUNCHER='pbs'");
}

}  // namespace
}  // namespace chorus
