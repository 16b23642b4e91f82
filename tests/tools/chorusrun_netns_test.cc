// Multi-host without real hosts: each "host" is a network namespace joined to this one by a
// veth pair with its own addresses; fake_ssh.sh starts a host's ranks inside its namespace.
// The ranks must reach the launcher's store across the veth links. Needs root (CI runs as
// root) and iproute2; skipped otherwise.
// TODO(lead): a real allreduce across the namespaces once chorus::Job is wired in (replace
// "join" with an allreduce worker), and a link set down mid-collective.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "run_helper.h"

namespace chorus::test {
namespace {

const std::string kWorker = FAKE_WORKER_PATH;
const std::string kFakeSsh = FAKE_SSH_PATH;

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

// Two namespaces, "hosts" 10.<n>.1.2 and 10.<n>.2.2, this side 10.<n>.k.1.
class NetnsHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || sh("command -v ip") != 0) GTEST_SKIP() << "needs root and iproute2";
    tag_ = std::to_string(::getpid() % 100000);
    net_ = "10." + std::to_string(200 + ::getpid() % 50);
    for (int k = 1; k <= 2; ++k) {
      std::string ns = this->ns(k), outer = "cv" + tag_ + "o" + std::to_string(k);
      std::string inner = "cv" + tag_ + "i" + std::to_string(k), subnet = net_ + "." + std::to_string(k);
      if (sh("ip netns add " + ns) != 0) GTEST_SKIP() << "'ip netns add' is not permitted here";
      created_ = k;
      ASSERT_EQ(sh("ip link add " + outer + " type veth peer name " + inner + " netns " + ns + " && " +
                    "ip addr add " + subnet + ".1/24 dev " + outer + " && ip link set " + outer + " up && " +
                    "ip -n " + ns + " addr add " + subnet + ".2/24 dev " + inner + " && " +
                    "ip -n " + ns + " link set " + inner + " up && ip -n " + ns + " link set lo up && " +
                    "ip -n " + ns + " route add default via " + subnet + ".1"),
                0);
    }
  }
  void TearDown() override {
    for (int k = 1; k <= created_; ++k) sh("ip netns del " + ns(k));  // removes the veth pairs
  }
  std::string ns(int k) const { return "chorus_t" + tag_ + "_" + std::to_string(k); }
  std::string host(int k) const { return net_ + "." + std::to_string(k) + ".2"; }
  RunSpec spec(std::vector<std::string> args) const {
    RunSpec s(std::move(args), {{"CHORUS_SECRET", "netns-test-secret"},
                                {"FAKE_SSH_NETNS", host(1) + "=" + ns(1) + " " + host(2) + "=" + ns(2)}});
    return s;
  }

  std::string tag_, net_;
  int created_ = 0;
};

TEST_F(NetnsHosts, RanksInEveryNamespaceJoinTheStore) {
  RunResult r = run_chorusrun(spec({"-np", "4", "-H", host(1) + ":2," + host(2) + ":2", "--rsh",
                                    kFakeSsh, "--start-timeout", "10", kWorker, "join", "-1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(NetnsHosts, AHostThatIsCutOffFailsTheJobNamingItsRanks) {
  ASSERT_EQ(sh("ip -n " + ns(2) + " link set cv" + tag_ + "i2 down"), 0);
  RunResult r = run_chorusrun(spec({"-np", "4", "-H", host(1) + ":2," + host(2) + ":2", "--rsh",
                                    kFakeSsh, "--start-timeout", "2", "--grace-seconds", "1",
                                    kWorker, "join", "-1"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("2 (on " + host(2) + "), 3 (on " + host(2) + ")"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 10.0);
}

}  // namespace
}  // namespace chorus::test
