// Dataset pipeline: every stage against a hand-computed reference, shuffle determinism,
// threads (map, prefetch) and their errors, distribute() under every policy, TFRecord files.
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "chorus/error.h"
#include "chorus/train/dataset.h"
#include "chorus/train/tfrecord.h"

#include "../../common/temp_dir.h"

namespace chorus {
namespace {

using Rows = std::vector<std::vector<int64_t>>;

std::vector<int64_t> to_vector(const at::Tensor& t) {
  at::Tensor flat = t.to(at::kLong).contiguous().reshape({-1});
  return {flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel()};
}

// Component 0 of every element, flattened: one row per element.
Rows rows_of(const Dataset& ds, int64_t epoch = 0, int64_t limit = 100000) {
  Rows out;
  DatasetIterator it = ds.iterate(epoch);
  while (auto e = it.next()) {
    out.push_back(to_vector((*e)[0]));
    if (static_cast<int64_t>(out.size()) >= limit) break;
  }
  return out;
}

// Scalars of a dataset of scalar elements.
std::vector<int64_t> values_of(const Dataset& ds, int64_t epoch = 0) {
  std::vector<int64_t> out;
  for (const auto& row : rows_of(ds, epoch)) out.insert(out.end(), row.begin(), row.end());
  return out;
}

std::vector<int64_t> iota(int64_t from, int64_t to) {
  std::vector<int64_t> v(static_cast<size_t>(to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  return v == iota(0, n);
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no InvalidArgument";
}

// ---- Sources ----

TEST(Dataset, FromTensorSlicesYieldsRowsOfEveryTensor) {
  at::Tensor x = at::arange(12, at::kLong).reshape({4, 3});
  at::Tensor y = at::arange(4, at::kLong) * 10;
  Dataset ds = Dataset::from_tensor_slices({x, y});
  EXPECT_EQ(ds.cardinality(), 4);
  EXPECT_EQ(ds.describe(), "from_tensor_slices(4)");
  DatasetIterator it = ds.iterate();
  for (int64_t i = 0; i < 4; ++i) {
    auto e = it.next();
    ASSERT_TRUE(e);
    ASSERT_EQ(e->size(), 2u);
    EXPECT_EQ(to_vector((*e)[0]), iota(3 * i, 3 * i + 3));
    EXPECT_EQ((*e)[1].dim(), 0);
    EXPECT_EQ((*e)[1].item<int64_t>(), 10 * i);
  }
  EXPECT_FALSE(it.next());
  EXPECT_FALSE(it.next());
}

TEST(Dataset, FromTensorSlicesRejectsBadTensors) {
  EXPECT_NE(error_of([] { Dataset::from_tensor_slices({}); }).find("no tensors"),
            std::string::npos);
  std::string m = error_of([] {
    Dataset::from_tensor_slices({at::zeros({4, 2}), at::zeros({5})});
  });
  EXPECT_NE(m.find("tensor 1 has shape [5] but tensor 0 has [4, 2]"), std::string::npos) << m;
  EXPECT_NE(error_of([] { Dataset::from_tensor_slices({at::zeros({})}); }).find("scalar"),
            std::string::npos);
  EXPECT_NE(error_of([] { Dataset::from_tensor_slices({at::Tensor()}); }).find("undefined"),
            std::string::npos);
}

TEST(Dataset, RangeAndEmpty) {
  EXPECT_EQ(values_of(Dataset::range(5)), iota(0, 5));
  EXPECT_EQ(Dataset::range(5).iterate().next()->at(0).scalar_type(), at::kLong);
  EXPECT_TRUE(values_of(Dataset::range(0)).empty());
  EXPECT_TRUE(values_of(Dataset()).empty());
  EXPECT_EQ(Dataset().cardinality(), 0);
  EXPECT_THROW(Dataset::range(-1), InvalidArgument);
}

TEST(Dataset, FromFilesConcatenatesFilesInOrderAndOpensLazily) {
  std::vector<std::string> opened;
  auto open = [&opened](const std::string& f) {
    opened.push_back(f);
    const int64_t k = std::stoll(f.substr(1));
    return Dataset::range(3).map([k](Example e) { return Example{e[0] + 10 * k}; });
  };
  Dataset ds = Dataset::from_files({"f1", "f2", "f3"}, open);
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.describe(), "from_files(3 files)");
  DatasetIterator it = ds.iterate();
  EXPECT_TRUE(opened.empty());
  it.next();
  EXPECT_EQ(opened, std::vector<std::string>{"f1"});
  std::vector<int64_t> rest;
  while (auto e = it.next()) rest.push_back((*e)[0].item<int64_t>());
  EXPECT_EQ(rest, (std::vector<int64_t>{11, 12, 20, 21, 22, 30, 31, 32}));
  EXPECT_EQ(Dataset::from_files({}, open).cardinality(), 0);
}

// ---- shuffle ----

TEST(Shuffle, FullBufferIsAPermutationDeterministicPerSeedAndEpoch) {
  Dataset ds = Dataset::range(100).shuffle(100, 7);
  std::vector<int64_t> e0 = values_of(ds, 0);
  EXPECT_TRUE(is_permutation_of_range(e0, 100));
  EXPECT_NE(e0, iota(0, 100));
  EXPECT_EQ(values_of(ds, 0), e0) << "same (seed, epoch), same order";
  EXPECT_EQ(values_of(Dataset::range(100).shuffle(100, 7), 0), e0) << "a rebuilt pipeline agrees";
  std::vector<int64_t> e1 = values_of(ds, 1);
  EXPECT_TRUE(is_permutation_of_range(e1, 100));
  EXPECT_NE(e1, e0) << "epochs reshuffle";
  EXPECT_NE(values_of(Dataset::range(100).shuffle(100, 8), 0), e0) << "seeds differ";
}

TEST(Shuffle, FixedOrderWithoutReshuffleEachIteration) {
  Dataset ds = Dataset::range(50).shuffle(50, 3, /*reshuffle_each_iteration=*/false);
  std::vector<int64_t> e0 = values_of(ds, 0);
  EXPECT_TRUE(is_permutation_of_range(e0, 50));
  EXPECT_EQ(values_of(ds, 1), e0);
  EXPECT_EQ(values_of(ds, 9), e0);
  std::vector<int64_t> twice = values_of(ds.repeat(2));
  EXPECT_EQ(std::vector<int64_t>(twice.begin() + 50, twice.end()), e0);
}

// Golden order: the RNG and seed derivation are portable, so this must hold on every
// platform and standard library. Changing it changes every user's data order.
TEST(Shuffle, GoldenOrderIsStable) {
  std::vector<int64_t> got = values_of(Dataset::range(10).shuffle(10, 42), 0);
  EXPECT_EQ(got, (std::vector<int64_t>{3, 6, 0, 1, 7, 5, 8, 4, 2, 9}));
}

TEST(Shuffle, SmallBufferOnlyReachesThatFarAhead) {
  EXPECT_EQ(values_of(Dataset::range(20).shuffle(1, 5)), iota(0, 20)) << "buffer 1: identity";
  const int64_t k = 4;
  std::vector<int64_t> v = values_of(Dataset::range(200).shuffle(k, 5));
  EXPECT_TRUE(is_permutation_of_range(v, 200));
  for (size_t p = 0; p < v.size(); ++p) {
    EXPECT_LE(v[p], static_cast<int64_t>(p) + k - 1) << "position " << p;
  }
  EXPECT_THROW(Dataset::range(3).shuffle(0, 1), InvalidArgument);
}

TEST(Shuffle, RepeatReshufflesEachRepetition) {
  Dataset shuffled = Dataset::range(20).shuffle(20, 11);
  std::vector<int64_t> v = values_of(shuffled.repeat(3), 2);
  ASSERT_EQ(v.size(), 60u);
  std::vector<std::vector<int64_t>> reps;
  for (int r = 0; r < 3; ++r) {
    reps.emplace_back(v.begin() + 20 * r, v.begin() + 20 * (r + 1));
    EXPECT_TRUE(is_permutation_of_range(reps.back(), 20)) << "repetition " << r;
  }
  EXPECT_NE(reps[0], reps[1]);
  EXPECT_NE(reps[1], reps[2]);
  EXPECT_EQ(reps[0], values_of(shuffled, 2)) << "repetition 0 is the epoch's order";
  EXPECT_EQ(values_of(shuffled.repeat(3), 2), v);
  EXPECT_NE(values_of(shuffled.repeat(3), 3), v);
}

// ---- repeat, take, skip, shard, filter ----

TEST(Repeat, CountsForeverAndEmpty) {
  EXPECT_EQ(values_of(Dataset::range(3).repeat(2)), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(values_of(Dataset::range(3).repeat(0)).empty());
  EXPECT_EQ(values_of(Dataset::range(3).repeat().take(7)),
            (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_TRUE(values_of(Dataset::range(0).repeat()).empty()) << "forever over nothing ends";
  EXPECT_EQ(Dataset::range(3).repeat(2).cardinality(), 6);
  EXPECT_EQ(Dataset::range(3).repeat().cardinality(), kInfiniteCardinality);
  EXPECT_EQ(Dataset::range(0).repeat().cardinality(), 0);
  EXPECT_EQ(Dataset::range(3).repeat().take(7).cardinality(), 7);
  EXPECT_THROW(Dataset::range(3).repeat(-2), InvalidArgument);
}

TEST(TakeSkipShard, MatchReferences) {
  EXPECT_EQ(values_of(Dataset::range(10).take(4)), iota(0, 4));
  EXPECT_EQ(values_of(Dataset::range(10).take(40)), iota(0, 10));
  EXPECT_EQ(values_of(Dataset::range(10).take(-1)), iota(0, 10));
  EXPECT_TRUE(values_of(Dataset::range(10).take(0)).empty());
  EXPECT_EQ(values_of(Dataset::range(10).skip(7)), iota(7, 10));
  EXPECT_TRUE(values_of(Dataset::range(10).skip(12)).empty());
  EXPECT_TRUE(values_of(Dataset::range(3).repeat().skip(-1)).empty());
  EXPECT_EQ(values_of(Dataset::range(10).shard(3, 0)), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(values_of(Dataset::range(10).shard(3, 1)), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(values_of(Dataset::range(10).shard(3, 2)), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_TRUE(values_of(Dataset::range(2).shard(3, 2)).empty());
  EXPECT_EQ(Dataset::range(10).take(4).cardinality(), 4);
  EXPECT_EQ(Dataset::range(10).take(40).cardinality(), 10);
  EXPECT_EQ(Dataset::range(10).skip(7).cardinality(), 3);
  EXPECT_EQ(Dataset::range(10).skip(-1).cardinality(), 0);
  EXPECT_EQ(Dataset::range(10).shard(3, 0).cardinality(), 4);
  EXPECT_EQ(Dataset::range(10).shard(3, 1).cardinality(), 3);
  EXPECT_EQ(Dataset::range(2).shard(3, 2).cardinality(), 0);
  EXPECT_THROW(Dataset::range(3).shard(0, 0), InvalidArgument);
  EXPECT_THROW(Dataset::range(3).shard(2, 2), InvalidArgument);
  EXPECT_THROW(Dataset::range(3).take(-2), InvalidArgument);
  EXPECT_THROW(Dataset::range(3).skip(-2), InvalidArgument);
}

TEST(Filter, KeepsMatchingElements) {
  Dataset ds =
      Dataset::range(10).filter([](const Example& e) { return e[0].item<int64_t>() % 3 == 0; });
  EXPECT_EQ(values_of(ds), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.batch(2).cardinality(), kUnknownCardinality);
}

// ---- batch ----

TEST(Batch, StacksComponentsWithAndWithoutRemainder) {
  at::Tensor x = at::arange(20, at::kLong).reshape({10, 2});
  Dataset ds = Dataset::from_tensor_slices({x, at::arange(10, at::kLong)});
  EXPECT_EQ(rows_of(Dataset::range(10).batch(4)), (Rows{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(rows_of(Dataset::range(10).batch(4, true)), (Rows{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(rows_of(Dataset::range(8).batch(4, true)), (Rows{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(Dataset::range(10).batch(4).cardinality(), 3);
  EXPECT_EQ(Dataset::range(10).batch(4, true).cardinality(), 2);
  EXPECT_EQ(Dataset::range(3).repeat().batch(4).cardinality(), kInfiniteCardinality);
  DatasetIterator it = ds.batch(4).iterate();
  auto b = it.next();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)[0].sizes(), (at::IntArrayRef{4, 2}));
  EXPECT_EQ((*b)[1].sizes(), (at::IntArrayRef{4}));
  EXPECT_EQ(to_vector((*b)[0]), iota(0, 8));
  EXPECT_EQ(ds.batch(4).batch_size(), 4);
  EXPECT_EQ(ds.batch_size(), -1);
  EXPECT_THROW(ds.batch(0), InvalidArgument);
}

TEST(Batch, ShapeMismatchNamesElementAndShapes) {
  // Element 5 is [3], the others [2].
  Dataset ds = Dataset::range(8).map([](Example e) {
    const int64_t i = e[0].item<int64_t>();
    return Example{at::full({i == 5 ? 3 : 2}, i, at::kLong)};
  });
  DatasetIterator it = ds.batch(4).iterate();
  EXPECT_TRUE(it.next());
  std::string m = error_of([&] { it.next(); });
  EXPECT_NE(m.find("element 5 (row 1 of batch 1) has component 0 of shape [3]"), std::string::npos)
      << m;
  EXPECT_NE(m.find("element 4 has [2]"), std::string::npos) << m;
  EXPECT_FALSE(it.next()) << "an error ends the iteration";
  Dataset dtypes = Dataset::range(4).map(
      [](Example e) { return Example{e[0].item<int64_t>() == 2 ? e[0].to(at::kFloat) : e[0]}; });
  EXPECT_NE(error_of([&] { rows_of(dtypes.batch(4)); }).find("element 2"), std::string::npos);
}

// ---- map, prefetch ----

TEST(Map, SequentialAndParallelPreserveOrder) {
  auto square = [](Example e) {
    const int64_t i = e[0].item<int64_t>();
    std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 500));
    return Example{e[0] * e[0]};
  };
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 60; ++i) want.push_back(i * i);
  EXPECT_EQ(values_of(Dataset::range(60).map(square)), want);
  EXPECT_EQ(values_of(Dataset::range(60).map(square, 4)), want);
  EXPECT_EQ(values_of(Dataset::range(60).map(square, kAutotune)), want);
  EXPECT_EQ(Dataset::range(60).map(square, 4).describe(), "range(60) -> map(parallel 4)");
  EXPECT_EQ(Dataset::range(60).map(square).cardinality(), 60);
  EXPECT_THROW(Dataset::range(3).map(square, 0), InvalidArgument);
  EXPECT_THROW(Dataset::range(3).map(nullptr), InvalidArgument);
}

Example fail_at_7(Example e) {
  if (e[0].item<int64_t>() == 7) throw std::runtime_error("bad element 7");
  return e;
}

// Elements before the failure arrive, then next() throws the map's own exception.
void expect_fails_at_7(const Dataset& ds) {
  DatasetIterator it = ds.iterate();
  for (int64_t i = 0; i < 7; ++i) {
    auto e = it.next();
    ASSERT_TRUE(e) << ds.describe();
    EXPECT_EQ((*e)[0].item<int64_t>(), i);
  }
  try {
    it.next();
    ADD_FAILURE() << "no error: " << ds.describe();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "bad element 7");
  }
  EXPECT_FALSE(it.next());
}

TEST(Map, ErrorsPropagateThroughThreadsInOrder) {
  expect_fails_at_7(Dataset::range(20).map(fail_at_7));
  expect_fails_at_7(Dataset::range(20).map(fail_at_7, 3));
  expect_fails_at_7(Dataset::range(20).map(fail_at_7).prefetch(2));
  expect_fails_at_7(Dataset::range(20).map(fail_at_7, 4).prefetch(5));
  expect_fails_at_7(Dataset::range(20).prefetch(1).map(fail_at_7, 2).prefetch(3));
}

TEST(Prefetch, SameElementsAndCardinality) {
  Dataset ds = Dataset::range(100).shuffle(30, 1).batch(7).prefetch(3);
  EXPECT_EQ(rows_of(ds, 4), rows_of(Dataset::range(100).shuffle(30, 1).batch(7), 4));
  EXPECT_EQ(ds.cardinality(), 15);
  EXPECT_EQ(Dataset::range(3).prefetch(kAutotune).describe(), "range(3) -> prefetch(2)");
  EXPECT_THROW(Dataset::range(3).prefetch(0), InvalidArgument);
}

TEST(Prefetch, DestructorReturnsPromptlyOnInfiniteDatasets) {
  std::atomic<int64_t> calls{0};
  auto slow = [&calls](Example e) {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return e;
  };
  Dataset ds = Dataset::range(5).repeat().map(slow, 2).prefetch(4).prefetch(2);
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 20; ++round) {
    DatasetIterator it = ds.iterate(round);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(it.next());
  }
  {
    DatasetIterator never_read = Dataset::range(10).repeat().prefetch(8).iterate();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the queue fills up
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 3.0);
  EXPECT_GT(calls.load(), 0);
}

TEST(Iterator, OutlivesItsDatasetAndMoves) {
  DatasetIterator it = Dataset::range(4).map([](Example e) { return e; }, 2).prefetch(2).iterate();
  DatasetIterator moved = std::move(it);
  std::vector<int64_t> got;
  while (auto e = moved.next()) got.push_back((*e)[0].item<int64_t>());
  EXPECT_EQ(got, iota(0, 4));
  EXPECT_FALSE(DatasetIterator().next());
}

// ---- describe, cardinality, split_batch ----

TEST(Dataset, DescribeAndCardinality) {
  Dataset ds = Dataset::from_tensor_slices({at::zeros({60000, 2})}).shuffle(1024, 7).batch(128);
  EXPECT_EQ(ds.describe(), "from_tensor_slices(60000) -> shuffle(1024, seed 7) -> batch(128)");
  EXPECT_EQ(ds.cardinality(), 469);
  Dataset all = Dataset::range(10)
                    .shuffle(4, 1, false)
                    .repeat(2)
                    .batch(3, true)
                    .skip(1)
                    .take(2)
                    .shard(2, 1)
                    .prefetch(1);
  EXPECT_EQ(all.describe(),
            "range(10) -> shuffle(4, seed 1, same order each iteration) -> repeat(2) -> "
            "batch(3, drop_remainder) -> skip(1) -> take(2) -> shard(2, 1) -> prefetch(1)");
  EXPECT_EQ(all.cardinality(), 1);
  EXPECT_EQ(static_cast<int64_t>(rows_of(all).size()), 1);
  EXPECT_EQ(Dataset().describe(), "empty");
}

TEST(SplitBatch, SizesDifferByAtMostOneFirstLarger) {
  Example b{at::arange(10, at::kLong), at::zeros({10, 3})};
  auto sizes = [](const std::vector<Example>& parts) {
    std::vector<int64_t> s;
    for (const Example& p : parts) s.push_back(p[0].size(0));
    return s;
  };
  auto parts = split_batch(b, 3);
  EXPECT_EQ(sizes(parts), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(to_vector(parts[1][0]), iota(4, 7));
  EXPECT_EQ(parts[2][1].sizes(), (at::IntArrayRef{3, 3}));
  EXPECT_EQ(sizes(split_batch({at::arange(2, at::kLong)}, 3)), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(sizes(split_batch({at::arange(0, at::kLong)}, 2)), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(sizes(split_batch(b, 1)), (std::vector<int64_t>{10}));
  EXPECT_THROW(split_batch(b, 0), InvalidArgument);
  EXPECT_THROW(split_batch({at::zeros({})}, 2), InvalidArgument);
  EXPECT_THROW(split_batch({at::zeros({4}), at::zeros({5})}, 2), InvalidArgument);
}

// ---- distribute ----

// Component 0 of every batch of every worker: out[w][s].
std::vector<std::vector<at::Tensor>> worker_batches(const Dataset& ds, int workers,
                                                    AutoShardPolicy policy, int64_t epoch) {
  std::vector<std::vector<at::Tensor>> out(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) {
    DatasetIterator it = ds.distribute(workers, w, policy).iterate(epoch);
    while (auto b = it.next()) out[w].push_back((*b)[0]);
  }
  return out;
}

void expect_data_union_is_global(const Dataset& ds, int workers) {
  SCOPED_TRACE(ds.describe() + " over " + std::to_string(workers) + " workers");
  std::vector<at::Tensor> global;
  DatasetIterator it = ds.iterate(3);
  while (auto b = it.next()) global.push_back((*b)[0]);
  auto per = worker_batches(ds, workers, AutoShardPolicy::kData, 3);
  for (int w = 0; w < workers; ++w) {
    ASSERT_EQ(per[w].size(), global.size()) << "worker " << w << ": steps differ";
  }
  for (size_t s = 0; s < global.size(); ++s) {
    std::vector<at::Tensor> chunks;
    for (int w = 0; w < workers; ++w) {
      const int64_t n = global[s].size(0);
      const int64_t want = n / workers + (w < n % workers ? 1 : 0);
      EXPECT_EQ(per[w][s].size(0), want) << "step " << s << " worker " << w;
      chunks.push_back(per[w][s]);
    }
    EXPECT_TRUE(at::equal(at::cat(chunks, 0), global[s])) << "step " << s;
  }
}

TEST(Distribute, DataUnionOfWorkersIsTheGlobalBatch) {
  at::Tensor x = at::arange(22 * 2, at::kLong).reshape({22, 2});
  Dataset base = Dataset::from_tensor_slices({x, at::arange(22)}).shuffle(22, 5);
  for (int workers : {2, 3}) {
    expect_data_union_is_global(base.batch(6), workers);        // last global batch: 4 rows
    expect_data_union_is_global(base.batch(6, true), workers);  // all full
    expect_data_union_is_global(base.batch(6).prefetch(2), workers);
  }
  // A partial last batch smaller than the number of workers: empty chunks, same steps.
  expect_data_union_is_global(Dataset::range(13).batch(6), 3);
  Dataset d = base.batch(6).distribute(3, 1, AutoShardPolicy::kData);
  EXPECT_EQ(d.batch_size(), 2);
  EXPECT_EQ(d.cardinality(), 4);
  EXPECT_EQ(d.describe(),
            "from_tensor_slices(22) -> shuffle(22, seed 5) -> batch(6) -> "
            "distribute(DATA, worker 1 of 3, batch 2)");
  EXPECT_EQ((*d.iterate().next())[1].size(0), 2) << "every component is split";
}

// Four "files" whose elements are 100 * file + [0, 3).
Dataset four_files(int n = 4) {
  std::vector<std::string> files;
  for (int f = 0; f < n; ++f) files.push_back(std::to_string(f));
  return Dataset::from_files(files, [](const std::string& f) {
    const int64_t k = std::stoll(f);
    return Dataset::range(3).map([k](Example e) { return Example{e[0] + 100 * k}; });
  });
}

TEST(Distribute, FileShardsTheFileList) {
  Dataset ds = four_files().batch(4);
  std::set<int64_t> seen_files;
  for (int w = 0; w < 2; ++w) {
    Dataset mine = ds.distribute(2, w, AutoShardPolicy::kFile);
    EXPECT_EQ(mine.batch_size(), 2);
    EXPECT_EQ(mine.describe(), "from_files(2 files) -> batch(2; distributed FILE, worker " +
                                   std::to_string(w) + " of 2)");
    std::vector<int64_t> v;
    for (const auto& row : rows_of(mine)) {
      EXPECT_LE(row.size(), 2u);
      v.insert(v.end(), row.begin(), row.end());
    }
    const int64_t a = 100 * w, b = 100 * (w + 2);
    EXPECT_EQ(v, (std::vector<int64_t>{a, a + 1, a + 2, b, b + 1, b + 2})) << "worker " << w;
    for (int64_t x : v) EXPECT_TRUE(seen_files.insert(x).second) << "read twice: " << x;
  }
  EXPECT_EQ(seen_files.size(), 12u);
}

TEST(Distribute, FileNeedsAFilePerWorkerAndAFileSource) {
  std::string m = error_of([] { four_files(1).batch(4).distribute(2, 0, AutoShardPolicy::kFile); });
  EXPECT_NE(m.find("1 file(s) for 2 workers"), std::string::npos) << m;
  m = error_of([] { Dataset::range(8).batch(4).distribute(2, 0, AutoShardPolicy::kFile); });
  EXPECT_NE(m.find("not file-based"), std::string::npos) << m;
}

TEST(Distribute, AutoPicksFileOrData) {
  EXPECT_NE(four_files().batch(4).distribute(2, 1).describe().find("from_files(2 files)"),
            std::string::npos);
  EXPECT_NE(four_files().batch(4).distribute(4, 3).describe().find("FILE"), std::string::npos);
  const std::string few = four_files().batch(10).distribute(5, 0).describe();
  EXPECT_NE(few.find("from_files(4 files)"), std::string::npos) << few;
  EXPECT_NE(few.find("DATA"), std::string::npos) << few;
  EXPECT_NE(Dataset::range(8).batch(4).distribute(2, 0).describe().find("DATA"), std::string::npos);
}

TEST(Distribute, OffDuplicatesWithSmallerBatches) {
  Dataset ds = Dataset::range(10).shuffle(10, 2).batch(4);
  Rows w0 = rows_of(ds.distribute(2, 0, AutoShardPolicy::kOff), 1);
  Rows w1 = rows_of(ds.distribute(2, 1, AutoShardPolicy::kOff), 1);
  EXPECT_EQ(w0, w1);
  Rows want = rows_of(Dataset::range(10).shuffle(10, 2).batch(2), 1);
  EXPECT_EQ(w0, want);
  EXPECT_EQ(ds.distribute(2, 1, AutoShardPolicy::kOff).batch_size(), 2);
}

TEST(Distribute, RejectsBadArguments) {
  Dataset ds = Dataset::range(12).batch(6);
  EXPECT_NE(
      error_of([&] { ds.distribute(4, 0); }).find("global batch size 6 is not divisible by 4"),
      std::string::npos);
  EXPECT_NE(error_of([] { Dataset::range(12).distribute(2, 0); }).find("no batch() stage"),
            std::string::npos);
  EXPECT_THROW(ds.distribute(0, 0), InvalidArgument);
  EXPECT_THROW(ds.distribute(2, 2), InvalidArgument);
  EXPECT_THROW(ds.distribute(2, -1), InvalidArgument);
  EXPECT_NE(error_of([&] { ds.distribute(2, 0).distribute(3, 0); }).find("already distributed"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ds.distribute(2, 0, AutoShardPolicy::kOff).distribute(3, 0);
            }).find("already distributed"),
            std::string::npos);
  EXPECT_EQ(rows_of(ds.distribute(1, 0)), rows_of(ds)) << "one worker: everything";
}

// ---- TFRecord ----

using chorus::testing::TempDir;

Example parse_int(const std::string& record) {
  return {at::scalar_tensor(static_cast<int64_t>(std::stoll(record)), at::kLong)};
}

TEST(TFRecord, ReadsFilesInOrderAndShardsThem) {
  TempDir tmp;
  std::vector<std::string> files;
  for (int f = 0; f < 4; ++f) {
    files.push_back(tmp.file("part-" + std::to_string(f) + ".tfrecord"));
    TFRecordWriter w(files.back());
    for (int r = 0; r < 5; ++r) w.write(std::to_string(10 * f + r));
  }
  Dataset ds = Dataset::tfrecord(files, parse_int);
  EXPECT_EQ(ds.describe(), "tfrecord(4 files)");
  std::vector<int64_t> want;
  for (int f = 0; f < 4; ++f) {
    for (int r = 0; r < 5; ++r) want.push_back(10 * f + r);
  }
  EXPECT_EQ(values_of(ds), want);
  std::vector<int64_t> both;
  for (int w = 0; w < 2; ++w) {
    Dataset mine = ds.batch(4).distribute(2, w);  // AUTO: 4 files >= 2 workers -> FILE
    EXPECT_NE(mine.describe().find("tfrecord(2 files)"), std::string::npos);
    for (const auto& row : rows_of(mine)) both.insert(both.end(), row.begin(), row.end());
  }
  std::sort(both.begin(), both.end());
  EXPECT_EQ(both, want);
}

TEST(TFRecord, BadFilesRaiseWhenReached) {
  TempDir tmp;
  const std::string good = tmp.file("good"), bad = tmp.file("bad");
  {
    TFRecordWriter w(good);
    w.write("1");
  }
  std::ofstream(bad) << "this is not a tfrecord file at all";
  DatasetIterator it = Dataset::tfrecord({good, bad}, parse_int).iterate();
  EXPECT_TRUE(it.next());
  EXPECT_THROW(it.next(), InvalidArgument);
  EXPECT_THROW(values_of(Dataset::tfrecord({tmp.file("missing")}, parse_int)), IoError);
  EXPECT_THROW(Dataset::tfrecord({good}, nullptr), InvalidArgument);
}

}  // namespace
}  // namespace chorus
