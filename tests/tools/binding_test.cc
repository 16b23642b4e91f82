// chorusrun's cpu shares for local workers (tools/chorusrun/binding.h), on made-up cpu sets
// and a made-up sysfs topology.
#include "binding.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "options.h"

namespace chorus::run {
namespace {

TEST(CpuShare, SplitsTheCpusIntoContiguousRunsThatDifferByAtMostOne) {
  const std::vector<int> cpus = {0, 4, 1, 5, 2, 6, 3};  // any order: shares follow it
  std::vector<int> seen;
  std::vector<size_t> sizes;
  for (int r = 0; r < 3; ++r) {
    std::vector<int> share = cpu_share(cpus, r, 3, BindTo::kAuto);
    sizes.push_back(share.size());
    seen.insert(seen.end(), share.begin(), share.end());
  }
  EXPECT_EQ(seen, cpus);  // every cpu once, in order
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2, 3}));
  EXPECT_EQ(cpu_share(cpus, 0, 1, BindTo::kCore), cpus);
  EXPECT_EQ(cpu_share({0, 1}, 1, 2, BindTo::kCore), std::vector<int>{1});
}

TEST(CpuShare, NoneOrTooFewCpusLeaveTheWorkerUnbound) {
  EXPECT_TRUE(cpu_share({0, 1}, 0, 2, BindTo::kNone).empty());
  EXPECT_TRUE(cpu_share({0, 1}, 2, 3, BindTo::kAuto).empty());
  EXPECT_TRUE(cpu_share({}, 0, 1, BindTo::kAuto).empty());      // affinity unknown
  EXPECT_TRUE(cpu_share({0, 1}, 2, 2, BindTo::kCore).empty());  // no such local rank
  EXPECT_TRUE(cpu_share({0, 1}, -1, 2, BindTo::kCore).empty());
  try {
    cpu_share({0, 1}, 0, 3, BindTo::kCore);
    FAIL() << "3 workers bound to 2 cpus";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "--bind-to core: 3 workers on this host but only 2 cpus to bind them to (0-1); "
                 "use --bind-to none or fewer workers");
  }
}

TEST(CpuShare, CpuListsReadAsTheKernelWritesThem) {
  EXPECT_EQ(cpu_list_text({3, 0, 1, 2, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(cpu_list_text({5}), "5");
  EXPECT_EQ(cpu_list_text({}), "");
}

TEST(CpuShare, BindToNamesAreParsed) {
  EXPECT_EQ(parse_bind_to("auto"), BindTo::kAuto);
  EXPECT_EQ(parse_bind_to("core"), BindTo::kCore);
  EXPECT_EQ(parse_bind_to("none"), BindTo::kNone);
  EXPECT_STREQ(bind_to_name(BindTo::kCore), "core");
  EXPECT_THROW(parse_bind_to("socket"), UsageError);
}

// A sysfs-like tree: cpu<N>/topology/{physical_package_id,core_id}.
class FakeTopology : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/chorus_topology_XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    root_ = dir;
  }
  void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }
  void cpu(int n, int package, int core) {
    std::string d = root_ + "/cpu" + std::to_string(n);
    ::mkdir(d.c_str(), 0700);
    ::mkdir((d + "/topology").c_str(), 0700);
    std::ofstream(d + "/topology/physical_package_id") << package << "\n";
    std::ofstream(d + "/topology/core_id") << core << "\n";
  }
  std::string root_;
};

TEST_F(FakeTopology, HardwareThreadsOfACoreAreKeptTogether) {
  // Two packages of two cores with two threads each, numbered as Linux does: the first
  // thread of every core, then the second ones.
  for (int t = 0; t < 2; ++t) {
    for (int package = 0; package < 2; ++package) {
      for (int core = 0; core < 2; ++core) cpu(t * 4 + package * 2 + core, package, core);
    }
  }
  const std::vector<int> ordered = order_by_core({0, 1, 2, 3, 4, 5, 6, 7}, root_);
  EXPECT_EQ(ordered, (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  // Two workers: one package each; four: one core (both its threads) each.
  EXPECT_EQ(cpu_share(ordered, 1, 2, BindTo::kAuto), (std::vector<int>{2, 6, 3, 7}));
  EXPECT_EQ(cpu_share(ordered, 1, 4, BindTo::kAuto), (std::vector<int>{1, 5}));
}

TEST_F(FakeTopology, CpusWithoutTopologyKeepTheirNumberOrder) {
  EXPECT_EQ(order_by_core({3, 1, 2}, root_), (std::vector<int>{1, 2, 3}));
}

TEST(AllowedCpus, AreTheCpusThisProcessMayRunOn) {
  std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  std::set<int> unique(cpus.begin(), cpus.end());
  EXPECT_EQ(unique.size(), cpus.size());
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(static_cast<int>(cpus.size()), CPU_COUNT(&set));
  for (int c : cpus) EXPECT_TRUE(CPU_ISSET(c, &set)) << c;
}

}  // namespace
}  // namespace chorus::run
