// chorusrun's remote paths: ssh (through fake_ssh.sh, which runs the remote command on this
// machine, so quoting, the secret on stdin and the TERM/KILL control lines are exercised)
// and --mpi (OpenMPI's mpirun, when installed).
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "run_helper.h"

namespace chorus::test {
namespace {

const std::string kWorker = FAKE_WORKER_PATH;
const std::string kAllreduce = ALLREDUCE_WORKER_PATH;
const std::string kFakeSsh = FAKE_SSH_PATH;
// 127.0.0.2 is a loopback address but not "this host" to chorusrun: its ranks go over "ssh".
const std::vector<std::pair<std::string, std::string>> kSecretEnv = {
    {"CHORUS_SECRET", "test-secret-0123456789"}};

TEST(ChorusrunRemote, RanksOnOtherHostsGoThroughTheRemoteShell) {
  TempDir dir;
  RunSpec spec{{"-np", "3", "-H", "localhost:1,127.0.0.2:2", "--rsh", kFakeSsh, "-x",
                "CHORUS_TEST_EXPORT=it's quoted", kWorker, "env"},
               kSecretEnv};
  spec.env.emplace_back("FAKE_SSH_LOG", dir.path() + "/ssh.log");
  RunResult r = run_chorusrun(spec);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    auto vars = env_of(r, rank);
    EXPECT_EQ(vars["CHORUS_RANK"], std::to_string(rank));
    EXPECT_EQ(vars["CHORUS_SIZE"], "3");
    EXPECT_EQ(vars["CHORUS_CROSS_RANK"], rank == 0 ? "0" : "1");
    EXPECT_EQ(vars["CHORUS_CROSS_SIZE"], "2");
    EXPECT_EQ(vars["CHORUS_LOCAL_RANK"], rank == 0 ? "0" : std::to_string(rank - 1));
    EXPECT_EQ(vars["CHORUS_HOST_ID"], rank == 0 ? "localhost" : "127.0.0.2");
    EXPECT_EQ(vars["CHORUS_TEST_EXPORT"], "it's quoted");
    EXPECT_EQ(vars["CHORUS_SECRET"], "");
    EXPECT_EQ(vars["secret_file_mode"], "600");
  }
  std::ifstream log(dir.path() + "/ssh.log");
  std::string hosts((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(hosts, "127.0.0.2\n127.0.0.2\n");  // two remote ranks, one ssh each
}

TEST(ChorusrunRemote, SigintStopsRemoteWorkersToo) {
  TempDir dir;
  std::vector<pid_t> pids;
  RunSpec spec{{"-np", "3", "-H", "localhost:1,127.0.0.2:2", "--rsh", kFakeSsh, kWorker, "sleep",
                dir.path()},
               kSecretEnv};
  spec.during = [&](pid_t chorusrun) {
    for (int rank = 0; rank < 3; ++rank) {
      std::string path = dir.path() + "/pid." + std::to_string(rank);
      if (!wait_for_file(path, std::chrono::seconds(10))) return;
      pids.push_back(read_pid(path));
    }
    ::kill(chorusrun, SIGINT);
  };
  RunResult r = run_chorusrun(spec);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  ASSERT_EQ(pids.size(), 3u) << r.err;
  // The remote side stops its rank after the TERM line; give the orphan a moment to go.
  usleep(300 * 1000);
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "worker " << pid << " left behind";
}

TEST(ChorusrunRemote, RemoteFailureIsNamedWithItsHost) {
  RunResult r = run_chorusrun(RunSpec{
      {"-np", "2", "-H", "localhost:1,127.0.0.2:1", "--rsh", kFakeSsh, kWorker, "crash", "1"},
      kSecretEnv});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1 on 127.0.0.2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGSEGV"), std::string::npos) << r.err;
}

TEST(ChorusrunMpi, MpiStartsRanksThatReadOpenMpiVariables) {
  if (::access("/usr/bin/mpirun", X_OK) != 0)
    GTEST_SKIP() << "mpirun (Debian's openmpi-bin) is not installed";
  RunResult r = run_chorusrun(RunSpec{{"-np", "2", "--mpi", kWorker, "env"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // OpenMPI's --tag-output prefixes lines with [jobid,rank]<stdout>:
  EXPECT_NE(r.out.find("secret_file_mode=600"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("OMPI_COMM_WORLD_RANK=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CHORUS_STORE_ADDR=127.0.0.1:"), std::string::npos) << r.out;
}

// chorus::Job reads OMPI_COMM_WORLD_* and the store address chorusrun adds with -x.
TEST(ChorusrunMpi, TwoRanksAllreduceThroughMpirun) {
  if (::access("/usr/bin/mpirun", X_OK) != 0)
    GTEST_SKIP() << "mpirun (Debian's openmpi-bin) is not installed";
  RunResult r = run_chorusrun(RunSpec{{"-np", "2", "--mpi", kAllreduce, "--count", "1000003"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("allreduce ok rank 0 of 2 local 0/2 cross 0/1\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("allreduce ok rank 1 of 2 local 1/2 cross 0/1\n"), std::string::npos)
      << r.out;
}

TEST(ChorusrunMpi, MpiFailureFailsTheJob) {
  if (::access("/usr/bin/mpirun", X_OK) != 0)
    GTEST_SKIP() << "mpirun (Debian's openmpi-bin) is not installed";
  RunResult r = run_chorusrun(RunSpec{{"-np", "2", "--mpi", kWorker, "exit", "3"}});
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("mpirun on localhost"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace chorus::test
