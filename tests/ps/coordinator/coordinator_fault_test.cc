// Faults played by hand-driven workers on loopback: a worker dying or falling silent in the
// middle of a step, rejoining, claiming a live index, wrong secrets, malformed frames; and
// on the worker side, a coordinator that vanishes or falls silent.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <string>

#include "chorus/error.h"
#include "chorus/ps/coordinator.h"
#include "rendezvous/frame.h"
#include "test_util.h"

namespace chorus::ps {
namespace {

using std::chrono::milliseconds;
using testing::address_of;
using testing::RawWorker;
using testing::test_secret;
using testing::throws_as;
using testing::WorkerThread;
namespace proto = ::chorus::ps::coordinator;

constexpr milliseconds kWait{20000};

std::string echo(const std::string&, const std::string& argument) { return argument; }

// True when the peer closes `fd` (whatever it sends first) before the deadline.
bool closes(int fd) {
  char buf[256];
  for (;;) {
    if (!net::wait_fd(fd, POLLIN, Deadline::after(kWait))) return false;
    ssize_t k = ::recv(fd, buf, sizeof(buf), 0);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

bool is(const rendezvous::Frame& frame, proto::Msg type) {
  return frame.type == static_cast<uint16_t>(type);
}

TEST(CoordinatorFaultTest, StepOfAWorkerThatDiesIsRerunElsewhere) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  RawWorker doomed(coordinator.port());
  ASSERT_TRUE(is(doomed.hello(0), proto::Msg::kWelcome));
  RemoteValue value = coordinator.schedule("echo", "payload");
  EXPECT_EQ(doomed.next_step().argument, "payload");
  WorkerThread survivor(coordinator.port(), 1, echo);
  testing::ShutdownOnExit bye(coordinator);
  coordinator.wait_for_workers(2, kWait);
  doomed.close();  // dies holding the step
  EXPECT_EQ(value.get(), "payload");
  EXPECT_EQ(value.worker(), 1);
  EXPECT_EQ(value.attempts(), 2);
  EXPECT_NO_THROW(coordinator.join());
}

TEST(CoordinatorFaultTest, ADeadWorkerRejoinsUnderItsIndex) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  RemoteValue value = coordinator.schedule("echo", "again");
  {
    RawWorker first_life(coordinator.port());
    ASSERT_TRUE(is(first_life.hello(3), proto::Msg::kWelcome));
    first_life.next_step();
  }  // killed mid-step
  WorkerThread second_life(coordinator.port(), 3, echo);
  testing::ShutdownOnExit bye(coordinator);
  EXPECT_EQ(value.get(), "again");
  EXPECT_EQ(value.worker(), 3);
  EXPECT_EQ(value.attempts(), 2);
}

TEST(CoordinatorFaultTest, StepFailsAfterMaxAttemptsLost) {
  CoordinatorOptions options;
  options.max_attempts = 2;
  Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
  RemoteValue value = coordinator.schedule("echo", "cursed");
  for (int life = 0; life < 2; ++life) {
    RawWorker worker(coordinator.port());
    ASSERT_TRUE(is(worker.hello(0), proto::Msg::kWelcome));
    worker.next_step();
  }
  std::string text;
  ASSERT_TRUE(throws_as<UnavailableError>(value, &text));
  EXPECT_NE(text.find("lost 2 times"), std::string::npos) << text;
  EXPECT_THROW(coordinator.join(), UnavailableError);
}

TEST(CoordinatorFaultTest, SilentWorkerIsDroppedAfterTheHeartbeatTimeout) {
  CoordinatorOptions options;
  options.heartbeat_timeout = milliseconds(400);
  Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
  RawWorker frozen(coordinator.port());  // like a host that vanished: open, but silent
  ASSERT_TRUE(is(frozen.hello(0), proto::Msg::kWelcome));
  RemoteValue value = coordinator.schedule("echo", "x");
  frozen.next_step(/*answer_pings=*/false);
  WorkerThread alive(coordinator.port(), 1, echo);
  testing::ShutdownOnExit bye(coordinator);
  EXPECT_EQ(value.get(), "x");
  EXPECT_EQ(value.worker(), 1);
  EXPECT_TRUE(frozen.closed_by_peer());
}

TEST(CoordinatorFaultTest, SecondLiveWorkerWithTheSameIndexIsRejected) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  WorkerThread first(coordinator.port(), 0, echo);
  testing::ShutdownOnExit bye(coordinator);
  coordinator.wait_for_workers(1, kWait);
  try {
    serve_coordinator(address_of(coordinator.port()), 0, test_secret(), echo);
    FAIL() << "a duplicate index was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("worker 0 is already connected"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(coordinator.num_live_workers(), 1);
  EXPECT_EQ(coordinator.schedule("echo", "still fine").get(), "still fine");
}

// A worker restarted at once may say hello before the coordinator has seen its old
// connection close (on a loaded host the close can lag by milliseconds): the hello waits
// for the old connection a moment instead of being refused as a duplicate.
TEST(CoordinatorFaultTest, HelloWhileTheOldConnectionIsStillClosingIsWelcomed) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  auto first_life = std::make_unique<RawWorker>(coordinator.port());
  ASSERT_TRUE(is(first_life->hello(0), proto::Msg::kWelcome));
  RawWorker second_life(coordinator.port());  // connected and authenticated while the first lives
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    first_life.reset();
  });
  EXPECT_TRUE(is(second_life.hello(0), proto::Msg::kWelcome));
  closer.join();
  EXPECT_EQ(coordinator.num_live_workers(), 1);
  coordinator.shutdown_workers();
}

TEST(CoordinatorFaultTest, WrongSecretIsRejectedAndOthersKeepWorking) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  EXPECT_THROW(serve_coordinator(address_of(coordinator.port()), 0, Secret("wrong"), echo,
                                 milliseconds(5000)),
               AuthError);
  EXPECT_EQ(coordinator.num_live_workers(), 0);
  WorkerThread good(coordinator.port(), 0, echo);
  testing::ShutdownOnExit bye(coordinator);
  EXPECT_EQ(coordinator.schedule("echo", "ok").get(), "ok");
}

// Each case: what a hostile or broken peer sends after the handshake (and hello, when
// `enrolled`). The coordinator must drop it and keep serving a real worker.
struct Garbage {
  const char* name;
  bool enrolled;
  std::function<void(RawWorker&)> send;
};

std::vector<Garbage> garbage_cases() {
  auto raw_bytes = [](const std::string& bytes) {
    return [bytes](RawWorker& w) {
      ASSERT_EQ(::send(w.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(bytes.size()));
    };
  };
  auto oversized = [](RawWorker& w) {
    rendezvous::FrameHeader h;
    h.type = static_cast<uint16_t>(proto::Msg::kResult);
    h.length = 0xfffffff0u;  // no payload follows: must be refused from the header alone
    unsigned char header[rendezvous::kFrameHeaderBytes];
    rendezvous::encode_header(h, header);
    ASSERT_EQ(::send(w.fd(), header, sizeof(header), MSG_NOSIGNAL), 12);
  };
  return {
      {"bad magic", false, raw_bytes("GET / HTTP/1.1\r\n\r\n")},
      {"oversized frame", true, oversized},
      {"hello with trailing bytes", false,
       [](RawWorker& w) { w.send(proto::Msg::kHello, proto::encode_hello(1) + "x"); }},
      {"huge worker index", false,
       [](RawWorker& w) { w.send(proto::Msg::kHello, proto::encode_hello(0xffffffffu)); }},
      {"step sent by a worker", true,
       [](RawWorker& w) {
         w.send(proto::Msg::kStep, proto::encode_step({1, "f", "a"}));
       }},
      {"result for a step it does not hold", true,
       [](RawWorker& w) {
         proto::ReplyMsg reply;
         reply.id = 12345;
         w.send(proto::Msg::kResult, proto::encode_reply(reply));
       }},
      {"truncated result", true,
       [](RawWorker& w) { w.send(proto::Msg::kResult, std::string("\x01\x02", 2)); }},
      {"pong with a payload", true, [](RawWorker& w) { w.send(proto::Msg::kPong, "junk"); }},
  };
}

TEST(CoordinatorFaultTest, MalformedFramesDropTheConnectionAndServingGoesOn) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  WorkerThread good(coordinator.port(), 0, echo);
  testing::ShutdownOnExit bye(coordinator);
  coordinator.wait_for_workers(1, kWait);
  for (const Garbage& g : garbage_cases()) {
    SCOPED_TRACE(g.name);
    RawWorker hostile(coordinator.port());
    if (g.enrolled) {
      ASSERT_TRUE(is(hostile.hello(9), proto::Msg::kWelcome));
    }
    g.send(hostile);
    EXPECT_TRUE(hostile.closed_by_peer());
    EXPECT_TRUE(testing::eventually([&] { return coordinator.num_live_workers() == 1; }));
    EXPECT_EQ(coordinator.schedule("echo", g.name).get(), g.name);
  }
  // Worker 9 was dropped, but it had connected: it still counts as seen.
  EXPECT_EQ(coordinator.num_workers_seen(), 2);
  EXPECT_TRUE(coordinator.wait_for_workers_seen(2, milliseconds(0)));
  EXPECT_FALSE(coordinator.wait_for_workers_seen(3, milliseconds(50)));
}

TEST(CoordinatorFaultTest, GarbageBeforeTheHandshakeIsDropped) {
  Coordinator coordinator("127.0.0.1", 0, test_secret());
  net::Fd fd = net::connect_tcp({"127.0.0.1", coordinator.port()}, Deadline::after(kWait));
  std::string junk(64, '\xff');
  ASSERT_EQ(::send(fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL), 64);
  EXPECT_TRUE(closes(fd.get()));  // a REJECT at most, then the close
  WorkerThread good(coordinator.port(), 0, echo);
  testing::ShutdownOnExit bye(coordinator);
  EXPECT_EQ(coordinator.schedule("echo", "fine").get(), "fine");
}

// A socket that never speaks holds its slot until it leaves or its handshake times out;
// one more than max_clients is closed at once, long before that timeout.
TEST(CoordinatorFaultTest, ConnectionsOverMaxClientsAreRefusedUntilASlotFrees) {
  CoordinatorOptions options;
  options.max_clients = 1;
  options.handshake_timeout = kWait;
  Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
  auto silent = std::make_unique<net::Fd>(
      net::connect_tcp({"127.0.0.1", coordinator.port()}, Deadline::after(kWait)));
  net::Fd refused = net::connect_tcp({"127.0.0.1", coordinator.port()}, Deadline::after(kWait));
  EXPECT_TRUE(closes(refused.get()));
  EXPECT_EQ(coordinator.num_live_workers(), 0);
  silent.reset();  // leaves without a word: its slot frees once the acceptor reaps it
  std::unique_ptr<RawWorker> next;
  EXPECT_TRUE(testing::eventually([&] {
    try {
      next = std::make_unique<RawWorker>(coordinator.port());
      return is(next->hello(0), proto::Msg::kWelcome);
    } catch (const IoError&) {
      return false;  // refused: the slot is still held
    }
  }));
  ASSERT_TRUE(next);
  RemoteValue value = coordinator.schedule("echo", "served");
  proto::ReplyMsg reply;
  reply.id = next->next_step().id;
  reply.result = "served";
  next->send(proto::Msg::kResult, proto::encode_reply(reply));
  EXPECT_EQ(value.get(), "served");
}

TEST(CoordinatorFaultTest, MaxClientsMustBePositive) {
  CoordinatorOptions options;
  options.max_clients = 0;
  try {
    Coordinator coordinator("127.0.0.1", 0, test_secret(), options);
    ADD_FAILURE() << "max_clients 0 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("max_clients must be > 0"), std::string::npos) << e.what();
  }
}

TEST(CoordinatorFaultTest, WorkerSeesIoErrorWhenTheCoordinatorLeavesWithoutShutdown) {
  testing::FakeCoordinator fake;
  std::thread coordinator([&] {
    fake.accept_and_welcome(milliseconds(20000));
    fake.close();
  });
  EXPECT_THROW(serve_coordinator(address_of(fake.port()), 0, test_secret(), echo), IoError);
  coordinator.join();
}

// The coordinator sends a worker its next step only after the reply to the last one, so a
// second step while one runs comes from a broken or hostile coordinator, which could
// otherwise queue 64 MiB steps without bound. The worker drops the connection at once,
// while its step still runs, and serve_coordinator then throws IoError saying why.
TEST(CoordinatorFaultTest, WorkerDropsACoordinatorThatSendsASecondStep) {
  testing::FakeCoordinator fake;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  StepHandler blocked = [released](const std::string&, const std::string& argument) {
    released.wait_for(kWait);  // still running when the second step arrives
    return argument;
  };
  bool dropped = false;
  std::thread coordinator([&] {
    fake.accept_and_welcome(kWait);
    fake.send(proto::Msg::kStep, proto::encode_step({1, "echo", "a"}));
    fake.send(proto::Msg::kStep, proto::encode_step({2, "echo", "b"}));
    dropped = fake.closed_by_worker(milliseconds(5000));
    release.set_value();
    fake.close();
  });
  std::string text;
  try {
    serve_coordinator(address_of(fake.port()), 0, test_secret(), blocked);
  } catch (const IoError& e) {
    text = e.what();
  } catch (const std::exception& e) {  // caught here too: the thread must be joined
    text = std::string("not an IoError: ") + e.what();
  }
  coordinator.join();
  EXPECT_TRUE(dropped) << "the worker kept the connection open";
  EXPECT_NE(text.find("step 2 arrived while step 1 is still"), std::string::npos) << text;
  EXPECT_NE(text.find("one step at a time"), std::string::npos) << text;
}

TEST(CoordinatorFaultTest, WorkerGivesUpOnASilentCoordinator) {
  testing::FakeCoordinator fake;
  std::thread coordinator([&] { fake.accept_and_welcome(milliseconds(300)); });
  EXPECT_THROW(serve_coordinator(address_of(fake.port()), 0, test_secret(), echo), TimeoutError);
  coordinator.join();
}

}  // namespace
}  // namespace chorus::ps
