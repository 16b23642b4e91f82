// A ps in a child process that is SIGKILLed or SIGSTOPped: the client's next call fails
// with UnavailableError naming the ps index and address, within the client's timeout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "../common/free_port.h"
#include "ps_test_util.h"
#include "util/net.h"

namespace chorus::ps::testing {
namespace {

using ::testing::HasSubstr;

// Forks a process serving one ps on a free loopback port. Call before this process starts
// threads of its own, so the child inherits no held locks.
class ChildPs {
 public:
  ChildPs() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      try {
        ParameterServer server("127.0.0.1", 0, test_secret());
        uint16_t port = server.port();
        if (::write(fds[1], &port, sizeof(port)) != sizeof(port)) ::_exit(2);
        server.wait();
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    uint16_t port = 0;
    EXPECT_EQ(::read(fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
    ::close(fds[0]);
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~ChildPs() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void signal(int sig) { ::kill(pid_, sig); }
  // SIGSTOP takes effect asynchronously: wait until /proc says the process is stopped.
  bool stop() {
    ::kill(pid_, SIGSTOP);
    for (int i = 0; i < 2000; ++i) {
      std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
      std::string pid, comm, state;
      stat >> pid >> comm >> state;
      if (state == "T" || state == "t") return true;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return false;
  }
  void reap() {
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  const std::string& address() const { return address_; }

 private:
  pid_t pid_ = -1;
  std::string address_;
};

void expect_unavailable(const std::function<void()>& fn, const std::string& name) {
  try {
    fn();
    ADD_FAILURE() << "no UnavailableError";
  } catch (const UnavailableError& e) {
    EXPECT_THAT(e.what(), HasSubstr(name + " is unavailable"));
  }
}

TEST(PsProcess, KilledPsIsUnavailable) {
  ChildPs child;          // ps 1, forked before any thread exists here
  LocalCluster local(1);  // ps 0, in this process
  std::vector<std::string> addresses = {local.addresses[0], child.address()};
  PsClient client(addresses, test_secret(), milliseconds(20000));
  ModelLayout layout = test_layout(2);
  client.create(layout, Arrays(layout.variables, 1.0f).in(), sgd(0.1));
  Arrays got = Arrays::filled(layout.variables, 0.0f);
  client.pull(got.out());

  child.signal(SIGKILL);
  child.reap();
  auto start = Clock::now();
  expect_unavailable([&] { client.pull(got.out()); },
                     "parameter server 1 (" + child.address() + ")");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
  expect_unavailable([&] { client.push(Arrays::filled(layout.variables, 1.0f).in(), 0); },
                     "a parameter server");  // unusable after the first UnavailableError
}

TEST(PsProcess, StoppedPsTimesOutAsUnavailable) {
  ChildPs child;
  PsClient client({child.address()}, test_secret(), milliseconds(1000));
  std::vector<VariableSpec> vars = {{"w", 100}};
  ModelLayout layout{vars, round_robin(vars, 1)};
  client.create(layout, Arrays(vars, 1.0f).in(), sgd(0.1));
  ASSERT_TRUE(child.stop());
  auto start = Clock::now();
  expect_unavailable([&] { client.push(Arrays::filled(vars, 1.0f).in(), 0); },
                     "parameter server 0 (" + child.address() + ")");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  child.signal(SIGKILL);
}

TEST(PsProcess, WorkerStartedBeforeThePsConnectsWhenItComesUp) {
  // The client retries connecting until its timeout, so a ps that starts late is found.
  uint16_t port = test::free_port();
  std::string address = "127.0.0.1:" + std::to_string(port);
  std::unique_ptr<ParameterServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(300));
    late = std::make_unique<ParameterServer>("127.0.0.1", port, test_secret());
  });
  PsClient client({address}, test_secret(), milliseconds(20000));
  std::vector<VariableSpec> vars = {{"w", 5}};
  client.create({vars, round_robin(vars, 1)}, Arrays(vars, 3.0f).in(), sgd(0.1));
  starter.join();
  EXPECT_EQ(client.stats(0).elements, 5);
}

}  // namespace
}  // namespace chorus::ps::testing
