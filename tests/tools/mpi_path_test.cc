// The MPI data path (CHORUS_TRANSPORT=mpi, comm/mpi_comm.h) in real `mpirun` jobs: every
// collective against a reference, process sets that overlap, a SIGKILLed rank, an MPI the
// program initialised without thread support, and the path asked for outside mpirun.
#include <unistd.h>

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "run_helper.h"

namespace chorus::test {
namespace {

const std::string kWorker = MPI_PATH_WORKER_PATH;

// mpirun -np `np` [env...] worker args...; `env` (NAME=VALUE) is set by a shell in each rank,
// after mpirun's own variables.
RunSpec mpirun(int np, std::vector<std::string> args,
               const std::string& env = "CHORUS_TRANSPORT=mpi") {
  std::vector<std::string> all = {"--oversubscribe", "-np", std::to_string(np)};
  if (::geteuid() == 0) all.push_back("--allow-run-as-root");
  std::string command = "exec env " + env + " " + kWorker;
  for (const std::string& a : args) command += " " + a;
  all.insert(all.end(), {"sh", "-c", command});
  RunSpec spec(std::move(all));
  spec.program = "mpirun";
  spec.unset = {"CHORUS_RANK", "CHORUS_STORE_ADDR", "MASTER_ADDR", "MASTER_PORT"};
  spec.timeout = std::chrono::seconds(90);
  return spec;
}

class MpiPath : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  }
};

void expect_ok_on_every_rank(const RunResult& r, const std::string& mode, int np) {
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < np; ++rank) {
    std::string want = mode + " ok rank " + std::to_string(rank);
    EXPECT_EQ(lines_with_prefix(r.out, want).size(), 1u) << want << "\n" << r.out;
  }
}

TEST_F(MpiPath, EveryCollectiveTypeAndOpMatchesTheReference) {
  RunResult r = run_chorusrun(mpirun(3, {"collectives"}));
  expect_ok_on_every_rank(r, "collectives", 3);
}

TEST_F(MpiPath, OverlappingProcessSetsDrivenInOppositeOrdersDoNotDeadlock) {
  RunResult r = run_chorusrun(mpirun(3, {"process-sets"}));
  expect_ok_on_every_rank(r, "process-sets", 3);
}

// mpirun ends the job when a rank dies: the survivors never hang in MPI.
TEST_F(MpiPath, AKilledRankEndsTheJobPromptly) {
  RunResult r = run_chorusrun(mpirun(3, {"die-after", "20"}));
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_LT(r.seconds, 30.0) << r.err;
  EXPECT_NE(r.err.find("signal 9"), std::string::npos) << r.err;  // mpirun names the kill
}

TEST_F(MpiPath, AnMpiWithoutThreadSupportIsRefusedByName) {
  RunResult r = run_chorusrun(mpirun(2, {"init-single"}));
  EXPECT_NE(r.exit_code, 0);
  std::regex want(
      R"(rank 0: InvalidArgument: .*MPI was initialised by the program with MPI_THREAD_SINGLE; )"
      R"(chorus calls MPI from a thread of its own, which needs MPI_THREAD_MULTIPLE)");
  EXPECT_TRUE(std::regex_search(r.err, want)) << r.err;
}

// CHORUS_TRANSPORT=auto picks MPI when mpirun started the ranks across hosts (here: each
// rank told it is alone on its host), and chorus's own links on one host or when asked.
TEST_F(MpiPath, AutoChoosesMpiAcrossHostsUnderMpirunOnly) {
  struct Case {
    std::string env;
    bool mpi;
  };
  for (const Case& c :
       {Case{"OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0", true},
        Case{"CHORUS_TRANSPORT=auto", false},
        Case{"CHORUS_TRANSPORT=tcp OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0",
             false}}) {
    RunResult r = run_chorusrun(mpirun(2, {"plan"}, c.env));
    ASSERT_EQ(r.exit_code, 0) << c.env << "\n" << r.out << r.err;
    auto lines = lines_with_prefix(r.out, "plan=");
    ASSERT_EQ(lines.size(), 2u) << c.env << "\n" << r.out;
    for (const std::string& line : lines) {
      EXPECT_EQ(line.rfind("plan=mpi rank", 0) == 0, c.mpi) << c.env << ": " << line;
    }
  }
}

// chorusrun without --mpi starts ranks MPI knows nothing of: each is rank 0 of 1 there.
TEST_F(MpiPath, OutsideMpirunThePathIsRefusedNamingTheRanks) {
  RunSpec spec({"-np", "2", kWorker, "collectives"}, {{"CHORUS_TRANSPORT", "mpi"}});
  spec.timeout = std::chrono::seconds(60);
  RunResult r = run_chorusrun(spec);
  EXPECT_NE(r.exit_code, 0);
  std::regex want(
      R"(InvalidArgument: .*CHORUS_TRANSPORT=mpi: this process is rank 0 of 1 in MPI_COMM_WORLD )"
      R"(but rank [01] of 2 of the job: start the job with mpirun)");
  EXPECT_TRUE(std::regex_search(r.err, want)) << r.err;
}

}  // namespace
}  // namespace chorus::test
