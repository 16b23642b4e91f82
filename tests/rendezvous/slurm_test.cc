// Slurm's host lists, tasks-per-node lists and the derived store port (rendezvous/slurm.h).
#include "rendezvous/slurm.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "chorus/error.h"

namespace chorus::slurm {
namespace {

using Hosts = std::vector<std::string>;

// Expects `call` to throw InvalidArgument whose message contains `needle`.
template <typename F>
void expect_invalid(F call, const std::string& needle) {
  try {
    call();
    FAIL() << "no exception; expected one mentioning " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

void expect_bad_list(const std::string& list, const std::string& why) {
  SCOPED_TRACE(list);
  expect_invalid([&] { expand_hostlist(list, "SLURM_JOB_NODELIST"); },
                 "SLURM_JOB_NODELIST='" + list + "' is not a valid Slurm host list: " + why);
}

TEST(SlurmHostlist, PlainNamesAndRanges) {
  EXPECT_EQ(expand_hostlist("vm"), Hosts{"vm"});
  EXPECT_EQ(expand_hostlist("node[1-3,5],gpu07"),
            (Hosts{"node1", "node2", "node3", "node5", "gpu07"}));
  EXPECT_EQ(expand_hostlist("a,b.example.org,c_d-e"), (Hosts{"a", "b.example.org", "c_d-e"}));
  EXPECT_EQ(expand_hostlist("n[7]"), Hosts{"n7"});
  EXPECT_EQ(expand_hostlist("10.0.0.[1-2]"), (Hosts{"10.0.0.1", "10.0.0.2"}));
}

TEST(SlurmHostlist, PaddingFollowsTheLowerBound) {
  EXPECT_EQ(expand_hostlist("n[08-11]"), (Hosts{"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(expand_hostlist("n[8-10]"), (Hosts{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_hostlist("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_hostlist("n[0001,3]"), (Hosts{"n0001", "n3"}));
}

TEST(SlurmHostlist, SeveralBracketsGiveEveryCombinationInOrder) {
  EXPECT_EQ(expand_hostlist("r[1-2]n[1-2]"), (Hosts{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expand_hostlist("r[1-2]-x,y"), (Hosts{"r1-x", "r2-x", "y"}));
}

TEST(SlurmHostlist, MalformedListsAreNamed) {
  expect_bad_list("", "it is empty");
  expect_bad_list("a,,b", "empty host name");
  expect_bad_list("a,", "empty host name");
  expect_bad_list(",a", "empty host name");
  expect_bad_list("node[1-3", "unclosed '['");
  expect_bad_list("node1-3]", "']' without '['");
  expect_bad_list("n[1[2]]", "nested '['");
  expect_bad_list("n[]", "'' in a range is not a number");
  expect_bad_list("n[1-]", "'' in a range is not a number");
  expect_bad_list("n[a-b]", "'a' in a range is not a number");
  expect_bad_list("n[1-2-3]", "'2-3' in a range is not a number");
  expect_bad_list("n[5-3]", "range '5-3' is descending");
  expect_bad_list("n[1:2]", "'1:2' in a range is not a number");
  expect_bad_list("node 1", "character ' ' in a host name");
  expect_bad_list("n[1-2]x/y", "character '/' in a host name");
  expect_bad_list("n[1-9999999999]", "more than 1048576 hosts");
  expect_bad_list("a[1-2000]b[1-2000]", "more than 1048576 hosts");
  expect_bad_list("n[1234567890123456789]", "'1234567890123456789' in a range is too long");
}

TEST(SlurmTasksPerNode, Expands) {
  EXPECT_EQ(expand_tasks_per_node("2"), std::vector<int>{2});
  EXPECT_EQ(expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("1,4(x2)"), (std::vector<int>{1, 4, 4}));
}

TEST(SlurmTasksPerNode, MalformedListsAreNamed) {
  auto bad = [](const std::string& text, const std::string& why) {
    SCOPED_TRACE(text);
    expect_invalid(
        [&] { expand_tasks_per_node(text, "SLURM_TASKS_PER_NODE"); },
        "SLURM_TASKS_PER_NODE='" + text + "' is not a valid Slurm tasks-per-node list: " + why);
  };
  bad("", "it is empty");
  bad("0", "'0' is not a positive integer");
  bad("-1", "'-1' is not a positive integer");
  bad("2(x3", "'2(x3' lacks its ')'");
  bad("2(x)", "'' is not a positive integer");
  bad("2(x0)", "'0' is not a positive integer");
  bad("2,,1", "'' is not a positive integer");
  bad("x", "'x' is not a positive integer");
  bad("1(x2000000)", "more than 1048576 nodes");
}

TEST(SlurmStorePort, DeterministicWithinTheDocumentedRange) {
  EXPECT_EQ(store_port(0, 0), 20000);
  EXPECT_EQ(store_port(4242, 3), 20000 + (4242 * 97 + 3) % 10000);
  EXPECT_EQ(store_port(4242, 3), store_port(4242, 3));
  EXPECT_EQ(store_port(4294967295u, 4294967294u),
            20000 + (4294967295ull * 97 + 4294967294ull) % 10000);
  for (uint64_t job : {1u, 99u, 12345u, 4294967295u}) {
    for (uint64_t step = 0; step < 300; ++step) {
      int port = store_port(job, step);
      EXPECT_GE(port, kPortBase);
      EXPECT_LT(port, kPortBase + kPortCount);
    }
  }
}

TEST(SlurmStorePort, NearbyJobsAndStepsGetDistinctPorts) {
  std::set<int> ports;
  for (uint64_t job = 1000; job < 1100; ++job) {
    for (uint64_t step = 0; step < 90; ++step) ports.insert(store_port(job, step));
  }
  EXPECT_EQ(ports.size(), 100u * 90u);
}

TEST(SlurmResolve, NumericLocalAndUnknown) {
  EXPECT_EQ(resolve_address("10.1.2.3", "node"), "10.1.2.3");
  EXPECT_EQ(resolve_address("localhost", "node"), "127.0.0.1");
  expect_invalid([] { resolve_address("no-such-node.invalid", "Slurm node"); },
                 "cannot resolve Slurm node 'no-such-node.invalid'");
  EXPECT_TRUE(is_loopback_address("127.0.1.1"));
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.0.1"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("fe80::1"));
}

}  // namespace
}  // namespace chorus::slurm
