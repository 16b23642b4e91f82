// Workers as real processes, SIGKILLed or SIGSTOPped in the middle of a step. Every child
// is forked before the test creates any thread (the Coordinator's), and waits on a pipe for
// the coordinator's port; a child that blocks on "block" steps tells the test it started
// one by writing a byte to a shared pipe.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "chorus/error.h"
#include "chorus/ps/coordinator.h"
#include "test_util.h"

namespace chorus::ps {
namespace {

using std::chrono::milliseconds;
using testing::address_of;
using testing::test_secret;

constexpr milliseconds kWait{20000};

// Reads the port the parent sends; 0 if none comes within a minute.
uint16_t read_port(int fd) {
  uint16_t port = 0;
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 60000) != 1 || ::read(fd, &port, sizeof(port)) != sizeof(port)) return 0;
  return port;
}

[[noreturn]] void child_main(int index, bool blocks, int port_fd, int started_fd) {
  uint16_t port = read_port(port_fd);
  if (port == 0) ::_exit(3);
  auto handler = [&](const std::string& function, const std::string& argument) {
    if (function == "block" && blocks) {
      [[maybe_unused]] ssize_t n = ::write(started_fd, "b", 1);
      for (;;) ::pause();  // until killed
    }
    return argument + "@" + std::to_string(index);
  };
  try {
    serve_coordinator(address_of(port), index, test_secret(), handler, kWait);
  } catch (...) {
    ::_exit(1);
  }
  ::_exit(0);
}

// A forked worker process, killed and reaped on destruction if still running.
class ChildWorker {
 public:
  ChildWorker(int index, bool blocks, int started_fd) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[1]);
      child_main(index, blocks, fds[0], started_fd);
    }
    ::close(fds[0]);
    port_fd_ = fds[1];
  }
  ~ChildWorker() {
    ::close(port_fd_);
    if (pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void start(uint16_t port) {
    ASSERT_EQ(::write(port_fd_, &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  }
  void signal(int sig) { ::kill(pid_, sig); }
  // waitpid's status once the child has ended.
  int wait() {
    int status = 0;
    EXPECT_EQ(::waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int port_fd_ = -1;
};

class ProcessTest : public ::testing::Test {
 protected:
  ProcessTest() { EXPECT_EQ(::pipe(started_), 0); }
  ~ProcessTest() override {
    ::close(started_[0]);
    ::close(started_[1]);
  }
  // Waits for a blocking child to report that its step started.
  bool step_started() {
    pollfd p{started_[0], POLLIN, 0};
    char byte;
    return ::poll(&p, 1, static_cast<int>(kWait.count())) == 1 &&
           ::read(started_[0], &byte, 1) == 1;
  }
  int started_[2];
};

TEST_F(ProcessTest, KilledWorkersStepIsRerunAndTheWorkerRejoins) {
  ChildWorker doomed(0, /*blocks=*/true, started_[1]);
  ChildWorker survivor(1, false, started_[1]);
  ChildWorker reborn(0, false, started_[1]);
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  doomed.start(coordinator.port());
  coordinator.wait_for_workers(1, kWait);
  RemoteValue value = coordinator.schedule("block", "step");
  ASSERT_TRUE(step_started());
  survivor.start(coordinator.port());
  coordinator.wait_for_workers(2, kWait);
  doomed.signal(SIGKILL);
  int status = doomed.wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(value.get(), "step@1");
  EXPECT_EQ(value.attempts(), 2);
  EXPECT_NO_THROW(coordinator.join());

  reborn.start(coordinator.port());  // worker 0 comes back
  ASSERT_TRUE(testing::eventually([&] { return coordinator.num_live_workers() == 2; }));
  survivor.signal(SIGKILL);
  survivor.wait();
  ASSERT_TRUE(testing::eventually([&] { return coordinator.num_live_workers() == 1; }));
  std::vector<RemoteValue> values;
  for (int i = 0; i < 5; ++i) values.push_back(coordinator.schedule("echo", std::to_string(i)));
  coordinator.join();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(values[i].get(), std::to_string(i) + "@0");
  coordinator.shutdown_workers();
  status = reborn.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(ProcessTest, StoppedWorkerIsDroppedByTheHeartbeat) {
  ChildWorker frozen(0, /*blocks=*/true, started_[1]);
  ChildWorker alive(1, false, started_[1]);
  CoordinatorOptions options;
  options.heartbeat_timeout = milliseconds(1500);
  Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
  frozen.start(coordinator.port());
  coordinator.wait_for_workers(1, kWait);
  RemoteValue value = coordinator.schedule("block", "step");
  ASSERT_TRUE(step_started());
  frozen.signal(SIGSTOP);  // its socket stays open: only the heartbeat can tell
  alive.start(coordinator.port());
  EXPECT_EQ(value.get(), "step@1");
  EXPECT_EQ(value.attempts(), 2);
  frozen.signal(SIGKILL);
  frozen.wait();
  coordinator.shutdown_workers();
  int status = alive.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace chorus::ps
