// The shared heap (src/torch/shared_heap.h) in real jobs of two processes under chorusrun:
// each mode of shared_heap_worker.cc checks itself on every rank.
#include <gtest/gtest.h>

#include <string>

#include "tools/run_helper.h"

namespace chorus::test {
namespace {

void expect_ok(const std::string& mode, EnvList env = {}) {
  RunSpec spec({"-np", "2", SHARED_HEAP_WORKER_PATH, mode}, std::move(env));
  spec.timeout = std::chrono::seconds(60);
  RunResult r = run_chorusrun(spec);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string r_ = std::to_string(rank);
    std::string want = "[" + r_ + "] " + mode + " ok rank " + r_;
    EXPECT_EQ(lines_with_prefix(r.out, want).size(), 1u) << want << "\n" << r.out << r.err;
  }
}

TEST(SharedHeap, TensorsAndGradientsAreBornInSharedMemoryAndReducedThere) { expect_ok("heap"); }

TEST(SharedHeap, ATensorOutlivesShutdownAndInitMakesANewHeap) { expect_ok("shutdown"); }

TEST(SharedHeap, AForkedChildsTensorsAndWritesStayInTheChild) { expect_ok("fork"); }

TEST(SharedHeap, ZeroTurnsItOff) { expect_ok("off", {{"CHORUS_SHARED_HEAP", "0"}}); }

}  // namespace
}  // namespace chorus::test
