// chorusrun and OpenBLAS's core type (tools/chorusrun/openblas.h) through the real launcher:
// what it says it set is what every worker gets, a generic core reported by a fake
// libblas.so.3 gets the CPU's kernels, and the user's own value always wins.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "openblas.h"
#include "run_helper.h"

namespace chorus::test {
namespace {

const std::string kWorker = FAKE_WORKER_PATH;
const std::string kFakeBlasDir = FAKE_BLAS_DIR;  // holds the fake libblas.so.3

std::optional<std::string> choice_here(const std::string& core) {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  return run::choose_openblas_coretype(run::parse_cpu_features(text.str()), core, nullptr);
}

// chorusrun -v -np 2 fake_worker env, with OPENBLAS_CORETYPE removed and `env` added.
RunResult run_env(EnvList env) {
  RunSpec spec{{"-v", "-np", "2", kWorker, "env"}, std::move(env)};
  spec.unset = {"OPENBLAS_CORETYPE"};
  return run_chorusrun(spec);
}

std::vector<std::string> lines_containing(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) out.push_back(line);
  }
  return out;
}

void expect_workers_get(const RunResult& r, const std::string& value) {
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(env_of(r, rank)["OPENBLAS_CORETYPE"], value) << "rank " << rank << "\n" << r.err;
  }
}

TEST(ChorusrunOpenblas, TheRealProbeAgreesWithTheDecisionAndTheWorkers) {
  RunResult r = run_env({});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto kept = lines_containing(r.err, "chorusrun: OpenBLAS core: ");
  auto set = lines_containing(r.err, "OPENBLAS_CORETYPE=");
  ASSERT_EQ(kept.size() + set.size(), 1u) << r.err;
  if (!kept.empty()) {
    // "OpenBLAS core: Cooperlake (kept)" on this project's machine: nothing may be set.
    std::string core = kept[0].substr(kept[0].find(": OpenBLAS core: ") + 17);
    core = core.substr(0, core.find(" (kept)"));
    if (core != "none found") {
      EXPECT_EQ(choice_here(core), std::nullopt) << core;
    }
    expect_workers_get(r, "");
  } else {
    std::string value = set[0].substr(set[0].find("OPENBLAS_CORETYPE=") + 18);
    expect_workers_get(r, value.substr(0, value.find(' ')));
  }
}

TEST(ChorusrunOpenblas, AGenericCoreGetsTheCpusKernelsSaidInOneLine) {
  RunResult r = run_env({{"LD_LIBRARY_PATH", kFakeBlasDir}, {"FAKE_OPENBLAS_CORE", "Prescott"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::optional<std::string> want = choice_here("Prescott");  // SkylakeX here
  if (!want) {
    expect_workers_get(r, "");  // a CPU without AVX2: Prescott is what it can run
    return;
  }
  expect_workers_get(r, *want);
  auto said = lines_containing(r.err, "OPENBLAS_CORETYPE=" + *want);
  ASSERT_EQ(said.size(), 1u) << r.err;
  EXPECT_EQ(said[0].rfind("chorusrun: OpenBLAS would run its generic Prescott kernels", 0), 0u)
      << said[0];
}

TEST(ChorusrunOpenblas, AKnownCoreIsKept) {
  RunResult r = run_env({{"LD_LIBRARY_PATH", kFakeBlasDir}, {"FAKE_OPENBLAS_CORE", "Haswell"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_workers_get(r, "");
  EXPECT_EQ(lines_containing(r.err, "chorusrun: OpenBLAS core: Haswell (kept)").size(), 1u)
      << r.err;
}

TEST(ChorusrunOpenblas, TheUsersValueWins) {
  for (const char* user : {"Haswell", ""}) {
    RunResult r = run_env({{"LD_LIBRARY_PATH", kFakeBlasDir}, {"OPENBLAS_CORETYPE", user}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_workers_get(r, user);
    EXPECT_TRUE(lines_containing(r.err, "OpenBLAS would run").empty()) << r.err;
  }
}

}  // namespace
}  // namespace chorus::test
