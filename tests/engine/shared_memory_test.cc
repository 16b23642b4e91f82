// Engine::alloc_shared and allreduces whose buffers lie in its memory: they run alone, in
// shared memory, next to heap tensors that fuse as usual; a rank whose buffer is on the
// heap makes the tensor run the usual way (no error); over TCP the memory is plain and
// everything still reduces; sizes that differ are an InvalidArgument on every rank.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "chorus/error.h"
#include "engine_harness.h"

namespace chorus::engine::testing {
namespace {

constexpr int64_t kBucket = 3000;  // floats per bucket: each over the 4 KiB handshake floor

float value(int r, int tensor, int64_t j) {
  return static_cast<float>(r + 1 + tensor * 10 + j % 7);
}

float sum_over(int ranks, int tensor, int64_t j) {
  float s = 0;
  for (int r = 0; r < ranks; ++r) s += value(r, tensor, j);
  return s;
}

// Two buckets inside one alloc_shared buffer and two heap tensors, enqueued together as
// sum allreduces; returns after checking every result on every rank.
void reduce_buckets_and_heap(EngineGroup& g, const std::vector<SharedBuffer>& memory,
                             const std::vector<bool>& use_shared) {
  g.run([&](int r, Engine& e) {
    std::vector<float> heap_buckets(2 * kBucket);
    float* buckets = use_shared[r] ? static_cast<float*>(memory[r].data()) : heap_buckets.data();
    std::vector<std::vector<float>> heap(2, std::vector<float>(100));
    for (int t = 0; t < 2; ++t) {
      for (int64_t j = 0; j < kBucket; ++j) buckets[t * kBucket + j] = value(r, t, j);
      for (int64_t j = 0; j < 100; ++j) heap[t][j] = value(r, 2 + t, j);
    }
    std::vector<Handle> h;
    for (int t = 0; t < 2; ++t) {
      float* b = buckets + t * kBucket;
      h.push_back(e.allreduce("bucket." + std::to_string(t), b, b, DataType::kFloat32, {kBucket}));
      h.push_back(e.allreduce("heap." + std::to_string(t), heap[t].data(), heap[t].data(),
                              DataType::kFloat32, {100}));
    }
    for (Handle& x : h) x.wait(kWait);
    for (int t = 0; t < 2; ++t) {
      for (int64_t j = 0; j < kBucket; ++j) {
        ASSERT_EQ(buckets[t * kBucket + j], sum_over(g.size(), t, j)) << "bucket " << t;
      }
      for (int64_t j = 0; j < 100; ++j) ASSERT_EQ(heap[t][j], sum_over(g.size(), 2 + t, j));
    }
  });
}

std::vector<SharedBuffer> alloc_everywhere(EngineGroup& g, size_t bytes) {
  std::vector<SharedBuffer> memory(g.size());
  g.run([&](int r, Engine& e) {
    Handle h = e.alloc_shared("buckets", bytes);
    h.wait(kWait);
    memory[r] = h.shared_buffer();
  });
  return memory;
}

class EngineSharedMemory : public ::testing::TestWithParam<int> {};

TEST_P(EngineSharedMemory, BucketsRunAloneInSharedMemoryAndHeapTensorsFuse) {
  EngineGroup g(GetParam(), test_options(), Transport::kShm);
  auto memory = alloc_everywhere(g, 2 * kBucket * sizeof(float));
  for (int r = 0; r < g.size(); ++r) {
    ASSERT_TRUE(memory[r].shared()) << "rank " << r;
    ASSERT_EQ(memory[r].size(), 2 * kBucket * sizeof(float));
  }
  for (int step = 0; step < 3; ++step) {
    reduce_buckets_and_heap(g, memory, std::vector<bool>(g.size(), true));
  }
  for (int r = 0; r < g.size(); ++r) {
    EXPECT_EQ(g[r].stats().shared_memory, 6u) << "two buckets a step, on rank " << r;
  }
}

TEST_P(EngineSharedMemory, OneRankOnTheHeapRunsTheUsualWayWithoutError) {
  EngineGroup g(GetParam(), test_options(), Transport::kShm);
  auto memory = alloc_everywhere(g, 2 * kBucket * sizeof(float));
  std::vector<bool> use_shared(g.size(), true);
  use_shared[g.size() - 1] = false;
  reduce_buckets_and_heap(g, memory, use_shared);
  EXPECT_EQ(g[0].stats().shared_memory, 0u);
  reduce_buckets_and_heap(g, memory, std::vector<bool>(g.size(), true));
  EXPECT_EQ(g[0].stats().shared_memory, 2u) << "the names' cached responses were replaced";
}

INSTANTIATE_TEST_SUITE_P(Ranks, EngineSharedMemory, ::testing::Values(2, 3));

TEST(EngineSharedMemoryTcp, PlainMemoryStillReduces) {
  EngineGroup g(2);
  auto memory = alloc_everywhere(g, 2 * kBucket * sizeof(float));
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(memory[r].shared());
  reduce_buckets_and_heap(g, memory, {true, true});
  EXPECT_EQ(g[0].stats().shared_memory, 0u);
}

TEST(EngineSharedMemoryErrors, DifferentSizesFailOnEveryRank) {
  EngineGroup g(2, test_options(), Transport::kShm);
  std::vector<std::string> errors(2);
  g.run([&](int r, Engine& e) {
    errors[r] =
        error_of<InvalidArgument>([&] { e.alloc_shared("m", r == 0 ? 4096 : 8192).wait(kWait); });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("Mismatched alloc_shared tensor shapes for 'm': rank 0 has [4096], "
                             "rank 1 has [8192]"),
              std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
  EXPECT_NE(error_of<InvalidArgument>([&] {
              g[0].alloc_shared("z", 0);
            }).find("alloc_shared 'z': 0 bytes (must be 1 .. "),
            std::string::npos);
  // The engine still works.
  auto memory = alloc_everywhere(g, 4096);
  EXPECT_TRUE(memory[0].shared());
}

}  // namespace
}  // namespace chorus::engine::testing
