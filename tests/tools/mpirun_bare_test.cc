// A bare `mpirun -np N ./program`, no store address anywhere: chorus's ranks meet through
// MPI (comm/mpi_bootstrap.h) and then run a real allreduce. Needs OpenMPI's mpirun and a
// chorus built with MPI; skipped otherwise.
#include <unistd.h>

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "run_helper.h"

namespace chorus::test {
namespace {

const std::string kAllreduce = ALLREDUCE_WORKER_PATH;

// Variables that would give the ranks a store address, so none is inherited from CI.
const std::vector<std::string> kUnset = {
    "CHORUS_RANK",   "CHORUS_STORE_ADDR",  "MASTER_ADDR",        "MASTER_PORT",
    "CHORUS_SECRET", "CHORUS_SECRET_FILE", "CHORUS_BIND_ADDRESS"};

RunSpec mpirun(std::vector<std::string> args, EnvList env = {}) {
  std::vector<std::string> all = {"--oversubscribe"};
  if (::geteuid() == 0) all.push_back("--allow-run-as-root");
  all.insert(all.end(), args.begin(), args.end());
  RunSpec spec(std::move(all), std::move(env));
  spec.program = "mpirun";
  spec.unset = kUnset;
  spec.timeout = std::chrono::seconds(60);
  return spec;
}

class BareMpirun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CHORUS_WITH_MPI) GTEST_SKIP() << "chorus was built without MPI";
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  }
};

TEST_F(BareMpirun, RanksMeetThroughMpiAndAllreduce) {
  RunResult r = run_chorusrun(mpirun({"-np", "3", kAllreduce, "--count", "100003"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    std::string want = "allreduce ok rank " + std::to_string(rank) + " of 3 local " +
                       std::to_string(rank) + "/3 cross 0/1";
    EXPECT_EQ(lines_with_prefix(r.out, want).size(), 1u) << want << "\n" << r.out;
  }
  EXPECT_EQ(r.err.find("WARNING"), std::string::npos) << r.err;  // no stray connections
}

// A rank whose secret differs cannot get into rank 0's store: every rank fails at once,
// naming it, instead of waiting for the timeout.
TEST_F(BareMpirun, ARankThatCannotReachTheStoreFailsEveryRankNamingIt) {
  RunResult r = run_chorusrun(
      mpirun({"-np", "2", "sh", "-c", "CHORUS_SECRET=s$OMPI_COMM_WORLD_RANK exec " + kAllreduce}));
  EXPECT_NE(r.exit_code, 0);
  for (int rank = 0; rank < 2; ++rank) {
    std::regex want("allreduce_worker: rank " + std::to_string(rank) +
                    R"(: IoError: .*bare mpirun job: rank\(s\) 1 could not reach rank 0's store)");
    EXPECT_TRUE(std::regex_search(r.err, want)) << rank << "\n" << r.err;
  }
  EXPECT_LT(r.seconds, 30.0);
}

}  // namespace
}  // namespace chorus::test
