// Multi-host without real hosts: each "host" is a network namespace with its own address,
// joined by a veth pair to a bridge in this namespace (which holds the launcher and its
// store); fake_ssh.sh starts a host's ranks inside its namespace. Ranks of different hosts
// talk across the bridge (layer 2: no IP forwarding needed), so a real allreduce runs over
// TCP between "hosts", and setting a host's link down cuts it off mid-collective.
// Needs root (CI runs as root) and iproute2; skipped when `ip netns add` is not permitted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "run_helper.h"

namespace chorus::test {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kWorker = FAKE_WORKER_PATH;
const std::string kAllreduce = ALLREDUCE_WORKER_PATH;
const std::string kFakeSsh = FAKE_SSH_PATH;

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

bool accepts_connections(const std::string& ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A real OpenSSH server inside a namespace, with its own config, host key and authorized
// key in `dir` (root may log in with that key only); stopped by the destructor.
class SshDaemon {
 public:
  static constexpr int kPort = 2222;  // the namespace has its own ports: no clash possible

  SshDaemon(const std::string& dir, const std::string& ns, const std::string& ip) : ip_(ip) {
    std::string config = dir + "/sshd_config." + ns;
    std::ofstream(config) << "Port " << kPort << "\nListenAddress " << ip << "\nHostKey " << dir
                          << "/host_key\nAuthorizedKeysFile " << dir
                          << "/authorized_keys\nPidFile none\nPermitRootLogin prohibit-password\n"
                          << "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                          << "UsePAM no\nStrictModes no\n";
    std::string log = dir + "/sshd." + ns + ".log";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl("/usr/sbin/ip", "ip", "netns", "exec", ns.c_str(), "/usr/sbin/sshd", "-D", "-f",
              config.c_str(), "-E", log.c_str(), nullptr);
      ::_exit(127);
    }
  }
  ~SshDaemon() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  bool wait_ready() const {
    for (int i = 0; i < 100; ++i) {
      if (accepts_connections(ip_, kPort)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::string ip_;
  pid_t pid_ = -1;
};

// Host and client keys for SshDaemon in `dir`; the client's public key is authorized.
bool make_ssh_keys(const std::string& dir) {
  return sh("ssh-keygen -q -t ed25519 -N '' -f " + dir + "/host_key && ssh-keygen -q -t ed25519 " +
            "-N '' -f " + dir + "/id && cp " + dir + "/id.pub " + dir + "/authorized_keys && " +
            "mkdir -p /run/sshd") == 0;
}

// Two namespaces, "hosts" 10.<n>.0.2 and 10.<n>.0.3, on a bridge that has 10.<n>.0.1.
class NetnsHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || sh("command -v ip") != 0) GTEST_SKIP() << "needs root and iproute2";
    // Unique per test: a namespace of an earlier test may outlive it (see TearDown).
    static int tests_here = 0;
    int id = ::getpid() % 100000 * 10 + tests_here++ % 10;
    tag_ = std::to_string(id);
    net_ = "10." + std::to_string(200 + id % 50) + ".0.";
    if (sh("ip netns add " + ns(1)) != 0) GTEST_SKIP() << "'ip netns add' is not permitted here";
    created_ = 1;
    ASSERT_EQ(sh("ip link add " + bridge() + " type bridge && ip addr add " + net_ + "1/24 dev " +
                 bridge() + " && ip link set " + bridge() + " up"),
              0);
    bridge_created_ = true;
    for (int k = 1; k <= 2; ++k) add_host(k);
  }

  void add_host(int k) {
    if (k > created_) {
      ASSERT_EQ(sh("ip netns add " + ns(k)), 0);
      created_ = k;
    }
    std::string outer = this->outer(k), in = inner(k), n = ns(k);
    ASSERT_EQ(sh("ip link add " + outer + " type veth peer name " + in + " netns " + n +
                 " && ip link set " + outer + " master " + bridge() + " && ip link set " + outer +
                 " up && ip -n " + n + " addr add " + host(k) + "/24 dev " + in + " && ip -n " + n +
                 " link set " + in + " up && ip -n " + n + " link set lo up"),
              0);
  }

  // A namespace whose link was cut mid-transfer outlives `ip netns del` (orphaned TCP sockets
  // with unsent data hold it for minutes), and with it its veth pair: so delete the pairs
  // explicitly, which leaves nothing visible behind.
  void TearDown() override {
    for (int k = 1; k <= created_; ++k) {
      sh("ip link del " + outer(k));  // deletes both ends
      sh("ip netns del " + ns(k));
    }
    if (bridge_created_) sh("ip link del " + bridge());
  }

  std::string ns(int k) const { return "chorus_t" + tag_ + "_" + std::to_string(k); }
  std::string bridge() const { return "cv" + tag_ + "b"; }
  std::string inner(int k) const { return "cv" + tag_ + "i" + std::to_string(k); }
  std::string outer(int k) const { return "cv" + tag_ + "o" + std::to_string(k); }
  std::string host(int k) const { return net_ + std::to_string(k + 1); }
  std::string hosts() const { return host(1) + ":2," + host(2) + ":2"; }
  RunSpec spec(std::vector<std::string> args) const {
    return RunSpec(std::move(args),
                   {{"CHORUS_SECRET", "netns-test-secret"},
                    {"FAKE_SSH_NETNS", host(1) + "=" + ns(1) + " " + host(2) + "=" + ns(2)}});
  }

  std::string tag_, net_;
  int created_ = 0;
  bool bridge_created_ = false;
};

TEST_F(NetnsHosts, RanksInEveryNamespaceJoinTheStore) {
  RunResult r = run_chorusrun(spec({"-np", "4", "-H", hosts(), "--rsh", kFakeSsh, "--start-timeout",
                                    "10", kWorker, "join", "-1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(NetnsHosts, AHostThatIsCutOffFailsTheJobNamingItsRanks) {
  ASSERT_EQ(sh("ip -n " + ns(2) + " link set " + inner(2) + " down"), 0);
  RunResult r = run_chorusrun(spec({"-np", "4", "-H", hosts(), "--rsh", kFakeSsh, "--start-timeout",
                                    "2", "--grace-seconds", "1", kWorker, "join", "-1"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("2 (on " + host(2) + "), 3 (on " + host(2) + ")"), std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 10.0);
}

// Ranks 0,1 on host 1 and 2,3 on host 2: shm inside a host, TCP across the bridge.
TEST_F(NetnsHosts, RanksOnTwoHostsAllreduceOverTcp) {
  RunResult r = run_chorusrun(spec({"-np", "4", "-H", hosts(), "--rsh", kFakeSsh, kAllreduce,
                                    "--count", "1000003", "--iterations", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    std::string want = "[" + std::to_string(rank) + "] allreduce ok rank " + std::to_string(rank) +
                       " of 4 local " + std::to_string(rank % 2) + "/2 cross " +
                       std::to_string(rank / 2) + "/2";
    EXPECT_EQ(lines_with_prefix(r.out, want).size(), 1u) << want << "\n" << r.out;
  }
}

// Host 2's link goes down while every rank is inside an endless allreduce loop: no reset
// reaches anyone, so the ranks time out (CHORUS_TIMEOUT_SECONDS=3) and the job fails,
// naming the first rank that failed and its host, with the rank's own error relayed.
TEST_F(NetnsHosts, AHostDroppingOffMidAllreduceFailsTheJobWithinTheTimeout) {
  TempDir dir;
  RunSpec s =
      spec({"-np", "4", "-H", hosts(), "--rsh", kFakeSsh, "--grace-seconds", "1", kAllreduce,
            "--count", "1000003", "--iterations", "0", "--ready-dir", dir.path()});
  s.env.emplace_back("CHORUS_TIMEOUT_SECONDS", "3");
  s.timeout = std::chrono::seconds(40);
  std::atomic<bool> cut{false};
  Clock::time_point cut_at;
  s.during = [&](pid_t) {
    for (int rank = 0; rank < 4; ++rank) {
      if (!wait_for_file(dir.path() + "/ready." + std::to_string(rank), std::chrono::seconds(20))) {
        return;
      }
    }
    cut_at = Clock::now();
    cut = sh("ip -n " + ns(2) + " link set " + inner(2) + " down") == 0;
  };
  RunResult r = run_chorusrun(s);
  double after_cut = std::chrono::duration<double>(Clock::now() - cut_at).count();
  ASSERT_TRUE(cut.load()) << "the ranks never all got through one allreduce\n" << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_GT(after_cut, 2.5) << "failed before the 3 s timeout could fire\n" << r.err;
  EXPECT_LT(after_cut, 3.0 + 4.0) << r.err;
  std::regex named(R"(rank (\d) on (10\.\d+\.0\.[23]) \(pid \d+\) ended with exit code 1)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, named)) << r.err;
  // The failed rank says why: its own timeout, or the cascade from a neighbour's abort; the
  // first rank to time out says which peer it was waiting for.
  std::regex why("\\[" + m[1].str() + "\\] allreduce_worker: rank " + m[1].str() +
                 ": (TimeoutError|IoError): allreduce of 1000003 float32 \\(rank " + m[1].str() +
                 " of 4\\)");
  EXPECT_TRUE(std::regex_search(r.err, why)) << r.err;
  std::regex timed_out(
      R"(\] allreduce_worker: rank \d: TimeoutError: allreduce of 1000003 float32 )"
      R"(\(rank \d of 4\) .*: timed out receiving from (tcp|shm) to rank \d)");
  EXPECT_TRUE(std::regex_search(r.err, timed_out)) << r.err;
  std::printf("  job failed %.1f s after the cut: %s\n", after_cut, m[0].str().c_str());
}

// A bare `mpirun -np 4 -H h1:2,h2:2` (its daemons started in the namespaces by
// netns_rsh.sh), no store address and no secret given: rank 0 offers its store over MPI,
// the ranks of the other host reach it across the bridge, and they allreduce over TCP.
// OpenMPI's own shared memory (vader) is left out: both "hosts" are named like this machine
// and share its /dev/shm, where their segments' names collide (a crash inside MPI). The
// daemons' shared hwloc topology is off too (rtc_hwloc_vmhole none): an orted crashed in it.
// Two OpenMPI daemons on one machine stay fragile (2 of 5 runs failed before that setting,
// 1 of 4 after it, a hang until the 60 s limit),
// so the test runs only when CHORUS_TEST_MPI_NETNS=1; CI keeps the one-host mpirun tests.
TEST_F(NetnsHosts, BareMpirunOnTwoHostsMeetsThroughMpi) {
  if (!CHORUS_WITH_MPI || sh("command -v mpirun") != 0) GTEST_SKIP() << "needs MPI";
  const char* opt_in = std::getenv("CHORUS_TEST_MPI_NETNS");
  if (!opt_in || std::string(opt_in) != "1") GTEST_SKIP() << "set CHORUS_TEST_MPI_NETNS=1";
  std::string subnet = net_ + "0/24";
  RunSpec s({"--allow-run-as-root",
             "-np",
             "4",
             "-H",
             hosts(),
             "--mca",
             "plm_rsh_agent",
             NETNS_RSH_PATH,
             "--mca",
             "oob_tcp_if_include",
             subnet,
             "--mca",
             "btl_tcp_if_include",
             subnet,
             "--mca",
             "btl",
             "self,tcp",
             "--mca",
             "rtc_hwloc_vmhole",
             "none",
             kAllreduce,
             "--count",
             "1000003"},
            {{"FAKE_SSH_NETNS", host(1) + "=" + ns(1) + " " + host(2) + "=" + ns(2)}});
  s.program = "mpirun";
  s.unset = {"CHORUS_RANK",   "CHORUS_STORE_ADDR",  "MASTER_ADDR",        "MASTER_PORT",
             "CHORUS_SECRET", "CHORUS_SECRET_FILE", "CHORUS_BIND_ADDRESS"};
  s.timeout = std::chrono::seconds(60);
  RunResult r = run_chorusrun(s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    std::string want = "allreduce ok rank " + std::to_string(rank) + " of 4 local " +
                       std::to_string(rank % 2) + "/2 cross " + std::to_string(rank / 2) + "/2";
    EXPECT_EQ(lines_with_prefix(r.out, want).size(), 1u) << want << "\n" << r.out;
  }
}

// The real remote path: chorusrun runs OpenSSH's ssh to an sshd inside each namespace
// (secret on ssh's stdin, env on the remote command line); the ranks allreduce over TCP.
TEST_F(NetnsHosts, RanksStartedThroughARealSshdAllreduce) {
  if (::access("/usr/sbin/sshd", X_OK) != 0 || sh("command -v ssh ssh-keygen") != 0) {
    GTEST_SKIP() << "needs OpenSSH (Debian's openssh-server and openssh-client)";
  }
  TempDir dir;
  ASSERT_TRUE(make_ssh_keys(dir.path()));
  SshDaemon sshd1(dir.path(), ns(1), host(1)), sshd2(dir.path(), ns(2), host(2));
  ASSERT_TRUE(sshd1.wait_ready() && sshd2.wait_ready()) << "sshd did not start";
  std::string rsh = "ssh -F /dev/null -p " + std::to_string(SshDaemon::kPort) + " -i " +
                    dir.path() + "/id -o UserKnownHostsFile=" + dir.path() +
                    "/known_hosts -o GlobalKnownHostsFile=/dev/null -o LogLevel=ERROR";
  RunResult r = run_chorusrun(spec({"-np", "4", "-H", hosts(), "--rsh", rsh, kAllreduce, "--count",
                                    "1000003", "--iterations", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    std::string want = "[" + std::to_string(rank) + "] allreduce ok rank " + std::to_string(rank) +
                       " of 4 local " + std::to_string(rank % 2) + "/2 cross " +
                       std::to_string(rank / 2) + "/2";
    EXPECT_EQ(lines_with_prefix(r.out, want).size(), 1u) << want << "\n" << r.out;
  }
  std::ifstream log(dir.path() + "/sshd." + ns(2) + ".log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Accepted publickey for root"), std::string::npos) << text;
}

}  // namespace
}  // namespace chorus::test
