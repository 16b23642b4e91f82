// Links without a store: shared-memory and TCP links on socketpairs, the ring's wrap-around,
// abort and liveness, plus the mesh's pure helpers (topology, hello, options).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>

#include "chorus/error.h"
#include "mesh_harness.h"
#include "transport/handshake.h"
#include "transport/shm/shm_link.h"
#include "transport/shm/shm_ring.h"
#include "transport/tcp/tcp_link.h"
#include "transport/topology.h"

namespace chorus::transport {
namespace {

using testing::payload;

struct LinkPair {
  std::unique_ptr<Link> a, b;
};

LinkPair make_shm_pair(uint64_t ring_bytes) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  net::Fd memfd;
  shm::Segment mine = shm::Segment::create(ring_bytes, memfd);
  shm::Segment theirs = shm::Segment::map_existing(memfd.get(), ring_bytes);
  return {std::make_unique<ShmLink>(0, 1, 0, std::move(mine), net::Fd(sv[0])),
          std::make_unique<ShmLink>(1, 0, 1, std::move(theirs), net::Fd(sv[1]))};
}

LinkPair make_tcp_pair() {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  return {std::make_unique<TcpLink>(1, net::Fd(sv[0]), "socketpair"),
          std::make_unique<TcpLink>(0, net::Fd(sv[1]), "socketpair")};
}

// Sends `n` bytes a -> b and b -> a at once from two threads; checks both arrive intact.
void exchange(Link& a, Link& b, size_t n) {
  auto run = [n](Link& link, int me) {
    std::vector<char> out = payload(me, 1 - me, n), in(n);
    Transfer t[2] = {Transfer::send(link, out.data(), n), Transfer::recv(link, in.data(), n)};
    Progress(Deadline::after(std::chrono::seconds(20)), "exchange").finish(t, 2);
    EXPECT_TRUE(in == payload(1 - me, me, n)) << "corrupt message of " << n << " bytes";
  };
  std::thread other([&] { run(b, 1); });
  run(a, 0);
  other.join();
}

TEST(ShmLink, MovesMessagesSmallerAndLargerThanTheRing) {
  LinkPair p = make_shm_pair(4096);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4095}, size_t{4096}, size_t{4097},
                   size_t{100003}}) {
    exchange(*p.a, *p.b, n);
  }
  EXPECT_EQ(p.a->describe(), "shm to rank 1 (same host)");
  EXPECT_EQ(p.a->poll_fd(), -1);
}

TEST(ShmLink, WrapsAroundWithUnevenChunks) {
  LinkPair p = make_shm_pair(4096);
  std::vector<char> out = payload(0, 1, 1 << 16), in(out.size());
  size_t sent = 0, got = 0, step = 1;
  while (got < out.size()) {  // single thread: interleave odd-sized writes and reads
    sent += p.a->try_send(out.data() + sent, std::min(out.size() - sent, step * 37 % 3001));
    got += p.b->try_recv(in.data() + got, std::min(in.size() - got, step * 53 % 2999 + 1));
    ++step;
  }
  EXPECT_EQ(in, out);
  char c;
  EXPECT_EQ(p.b->try_recv(&c, 1), 0u);
}

TEST(ShmLink, FullRingAcceptsNothingMore) {
  LinkPair p = make_shm_pair(4096);
  std::vector<char> big(10000, 'x');
  EXPECT_EQ(p.a->try_send(big.data(), big.size()), 4096u);
  EXPECT_EQ(p.a->try_send(big.data(), 1), 0u);
}

// What `link`'s receive throws (it must throw IoError).
std::string receive_error(Link& link) {
  char c;
  try {
    link.try_recv(&c, 1);
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "receive on a broken link did not throw";
  return "";
}

TEST(ShmLink, AbortBreaksBothEnds) {
  LinkPair p = make_shm_pair(4096);
  char c = 1;
  p.a->abort({});
  EXPECT_THROW(p.a->try_send(&c, 1), IoError);
  std::string err = receive_error(*p.b);
  EXPECT_NE(err.find("the peer aborted the link"), std::string::npos) << err;
  EXPECT_EQ(err.find("link ("), std::string::npos) << "no reason was given: " << err;
  EXPECT_THROW(p.b->check_alive(), IoError);
}

// The aborting rank's error reaches its peer's: printable ASCII only, at most the 511 bytes
// the segment holds; a second abort does not replace the first reason.
TEST(ShmLink, AbortTellsThePeerWhy) {
  LinkPair p = make_shm_pair(4096);
  const std::string head = "rank 0: TimeoutError: timed out";
  p.a->abort(head + "\n\x01" + std::string(600, 'x'));
  p.a->abort("a later reason");
  std::string err = receive_error(*p.b);
  std::string told =
      "the peer aborted the link (" + head + "??" + std::string(511 - head.size() - 2, 'x') + ")";
  EXPECT_NE(err.find(told), std::string::npos) << err;
  EXPECT_EQ(err.find("a later reason"), std::string::npos) << err;
  std::string own = receive_error(*p.a);
  EXPECT_NE(own.find("after this rank aborted the link"), std::string::npos) << own;
}

TEST(ShmLink, ClosedPeerIsSeenByCheckAlive) {
  LinkPair p = make_shm_pair(4096);
  EXPECT_NO_THROW(p.a->check_alive());
  p.b.reset();
  EXPECT_THROW(p.a->check_alive(), IoError);
}

// A rank preempted between an empty poll and its liveness check may find the peer gone
// with the peer's last bytes still in the ring: those are received, and only a receive
// for more than was sent is an error.
TEST(ShmLink, BytesSentBeforeThePeerExitedAreStillReceived) {
  LinkPair p = make_shm_pair(4096);
  std::vector<char> out = payload(0, 1, 1000), in(out.size());
  ASSERT_EQ(p.a->try_send(out.data(), out.size()), out.size());
  p.a.reset();
  Transfer t = Transfer::recv(*p.b, in.data(), in.size());
  Progress progress(Deadline::after(std::chrono::seconds(10)), "receive after the peer left");
  auto until = Clock::now() + std::chrono::milliseconds(5);  // liveness runs each millisecond
  while (Clock::now() < until) progress.idle(&t, 1);
  progress.finish(&t, 1);
  EXPECT_TRUE(in == out);

  Transfer more = Transfer::recv(*p.b, in.data(), 1);
  try {
    Progress(Deadline::after(std::chrono::seconds(10)), "one byte more").finish(&more, 1);
    FAIL() << "a receive from a peer that left returned";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
  }
}

// A link whose liveness checks are counted, around a real one.
class CountingChecks : public Link {
 public:
  explicit CountingChecks(Link& inner) : Link(inner.peer()), inner_(inner) {}
  size_t try_send(const void* data, size_t n) override { return inner_.try_send(data, n); }
  size_t try_recv(void* data, size_t n) override { return inner_.try_recv(data, n); }
  int poll_fd() const override { return inner_.poll_fd(); }
  void check_alive() override {
    ++checks;
    inner_.check_alive();
  }
  void abort(std::string_view reason) noexcept override { inner_.abort(reason); }
  std::string describe() const override { return inner_.describe(); }
  int checks = 0;

 private:
  Link& inner_;
};

// The same moment for a peer that signals through shared memory: it signalled and exited
// after the waiter last found it not ready, before the waiter's liveness check.
TEST(ShmLink, WaitUntilTakesASignalSentBeforeThePeerExited) {
  LinkPair p = make_shm_pair(4096);
  p.a.reset();
  CountingChecks link(*p.b);
  Progress progress(Deadline::after(std::chrono::seconds(10)), "wait for a signal");
  EXPECT_NO_THROW(progress.wait_until([&] { return link.checks > 0; }, {&link},
                                      [] { return std::string("the signal"); }));
  EXPECT_EQ(link.checks, 1);

  try {
    progress.wait_until([] { return false; }, {&link}, [] { return std::string("nothing"); });
    FAIL() << "a wait for a peer that left returned";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
  }
}

TEST(ShmLink, PeekAndConsumeReadInPlaceAcrossTheWrap) {
  LinkPair p = make_shm_pair(4096);
  std::vector<char> out = payload(0, 1, 3000), in;
  ASSERT_EQ(p.a->try_send(out.data(), out.size()), out.size());
  size_t n = 0;
  const char* at = p.b->peek_recv(&n);
  ASSERT_NE(at, nullptr);
  ASSERT_EQ(n, 3000u);
  in.assign(at, at + 2000);
  p.b->consume_recv(2000);
  // 3000 bytes readable from offset 2000: 2096 up to the wrap point, 904 after it.
  ASSERT_EQ(p.a->try_send(out.data(), 2000), 2000u);
  for (size_t want : {size_t{2096}, size_t{904}}) {
    at = p.b->peek_recv(&n);
    ASSERT_EQ(n, want);
    in.insert(in.end(), at, at + n);
    p.b->consume_recv(n);
  }
  out.insert(out.end(), out.begin(), out.begin() + 2000);
  EXPECT_EQ(in, out);
  at = p.b->peek_recv(&n);
  EXPECT_NE(at, nullptr);
  EXPECT_EQ(n, 0u);
}

TEST(ShmLink, ReserveAndCommitWriteInPlaceAcrossTheWrap) {
  LinkPair p = make_shm_pair(4096);
  std::vector<char> out = payload(0, 1, 5000), in(5000);
  size_t n = 0;
  char* at = p.a->reserve_send(&n);
  ASSERT_NE(at, nullptr);
  ASSERT_EQ(n, 4096u);
  std::memcpy(at, out.data(), 3000);
  p.a->commit_send(3000);
  ASSERT_EQ(p.b->try_recv(in.data(), 3000), 3000u);
  // Free from offset 3000: 1096 bytes up to the wrap point, then 3000 after it.
  size_t sent = 3000;
  for (size_t want : {size_t{1096}, size_t{3000}}) {
    at = p.a->reserve_send(&n);
    ASSERT_EQ(n, want);
    size_t k = std::min(n, out.size() - sent);
    std::memcpy(at, out.data() + sent, k);
    p.a->commit_send(k);
    sent += k;
  }
  ASSERT_EQ(sent, 5000u);
  ASSERT_EQ(p.b->try_recv(in.data() + 3000, 2000), 2000u);
  EXPECT_EQ(in, out);
  // Full: nothing to reserve until the reader frees space.
  ASSERT_EQ(p.a->try_send(out.data(), 4096), 4096u);
  at = p.a->reserve_send(&n);
  EXPECT_NE(at, nullptr);
  EXPECT_EQ(n, 0u);
  p.a->abort({});
  EXPECT_THROW(p.a->reserve_send(&n), IoError);
}

// A TCP link lends its receive staging (peek_recv) but no send memory, and cannot block.
TEST(Link, TcpLendsItsReceiveStagingOnly) {
  LinkPair p = make_tcp_pair();
  size_t n = 1;
  ASSERT_NE(p.a->peek_recv(&n), nullptr);
  EXPECT_EQ(n, 0u);  // nothing arrived yet
  EXPECT_FALSE(p.a->buffered_input());
  n = 1;
  EXPECT_EQ(p.a->reserve_send(&n), nullptr);
  EXPECT_EQ(n, 0u);
  EXPECT_FALSE(p.a->wait_ready(false, std::chrono::milliseconds(100)));
  // Peeked bytes stay until consumed; try_recv then continues where consume left off.
  std::vector<char> out = payload(1, 0, 1000), in(1000);
  ASSERT_EQ(p.b->try_send(out.data(), 1000), 1000u);
  const char* at = nullptr;
  for (int i = 0; i < 1000 && n < 1000; ++i) at = p.a->peek_recv(&n);
  ASSERT_EQ(n, 1000u);
  EXPECT_EQ(std::memcmp(at, out.data(), 1000), 0);
  p.a->consume_recv(600);
  EXPECT_TRUE(p.a->buffered_input());  // poll() would not see these 400 bytes
  EXPECT_EQ(p.a->try_recv(in.data(), 1000), 400u);
  EXPECT_EQ(std::memcmp(in.data(), out.data() + 600, 400), 0);
  EXPECT_FALSE(p.a->buffered_input());
}

// try_send stages the caller's bytes and, while the kernel takes them in pieces, sends the
// rest of that staging when the caller comes back for the next bytes; a caller that moves
// elsewhere gets its new bytes staged instead.
TEST(TcpLink, StagedSendsContinueOrRestage) {
  LinkPair p = make_tcp_pair();
  const size_t n = 3 * TcpLink::kSendStagingBytes + 12345;
  std::vector<char> out = payload(0, 1, n), in(n);
  std::thread reader([&] {
    Transfer t = Transfer::recv(*p.b, in.data(), n);
    Progress(Deadline::after(std::chrono::seconds(20)), "read").finish(&t, 1);
  });
  size_t done = 0;
  while (done < n) {
    done += p.a->try_send(out.data() + done, n - done);
  }
  reader.join();
  EXPECT_TRUE(in == out);
  // Restaging: a send from another address after a partial one carries the new bytes.
  std::vector<char> first = payload(2, 3, 64), second = payload(4, 5, 64), got(128);
  ASSERT_EQ(p.a->try_send(first.data(), 64), 64u);
  ASSERT_EQ(p.a->try_send(second.data(), 64), 64u);
  Transfer t = Transfer::recv(*p.b, got.data(), 128);
  Progress(Deadline::after(std::chrono::seconds(20)), "read").finish(&t, 1);
  EXPECT_EQ(std::memcmp(got.data(), first.data(), 64), 0);
  EXPECT_EQ(std::memcmp(got.data() + 64, second.data(), 64), 0);
}

// The outgoing staging starts small and grows when a larger send comes (under ASan, a
// staging that did not grow would be written past its end).
TEST(TcpLink, StagingGrowsWithTheSends) {
  LinkPair p = make_tcp_pair();
  const size_t big = TcpLink::kSendStagingBytes + 4096;
  std::vector<char> small = payload(6, 7, 100), large = payload(8, 9, big), in(100 + big);
  std::thread reader([&] {
    Transfer t = Transfer::recv(*p.b, in.data(), in.size());
    Progress(Deadline::after(std::chrono::seconds(20)), "read").finish(&t, 1);
  });
  for (const auto* out : {&small, &large}) {
    size_t done = 0;
    while (done < out->size()) done += p.a->try_send(out->data() + done, out->size() - done);
  }
  reader.join();
  EXPECT_EQ(std::memcmp(in.data(), small.data(), 100), 0);
  EXPECT_EQ(std::memcmp(in.data() + 100, large.data(), big), 0);
}

// Page-aligned memory of n bytes (and a page to spare).
std::unique_ptr<char, decltype(&std::free)> pages(size_t n) {
  void* at = nullptr;
  EXPECT_EQ(::posix_memalign(&at, 4096, n + 4096), 0);
  return {static_cast<char*>(at), &std::free};
}

// Caller memory away from a page boundary is sent as it is, memory near one through the
// outgoing staging; large receives go straight into the caller's memory wherever it lies.
// Streams that mix these keep every byte in order.
TEST(TcpLink, CallerMemoryAnywhereInItsPageKeepsTheStreamInOrder) {
  LinkPair p = make_tcp_pair();
  const size_t n = (size_t{3} << 20) + 777;
  auto out = pages(n), in = pages(n);
  // (send offset, receive offset) in their pages: sends staged or not.
  const std::pair<size_t, size_t> cases[] = {{0, 64}, {64, 0}, {1000, 2000}, {4090, 4090}, {0, 0}};
  for (auto [send_at, recv_at] : cases) {
    std::vector<char> data = payload(static_cast<int>(send_at), static_cast<int>(recv_at), n);
    std::memcpy(out.get() + send_at, data.data(), n);
    std::thread reader([&, recv_at = recv_at] {
      Transfer t = Transfer::recv(*p.b, in.get() + recv_at, n);
      Progress(Deadline::after(std::chrono::seconds(20)), "read").finish(&t, 1);
    });
    for (size_t done = 0; done < n;) done += p.a->try_send(out.get() + send_at + done, n - done);
    reader.join();
    EXPECT_EQ(std::memcmp(in.get() + recv_at, data.data(), n), 0)
        << "sent from " << send_at << ", received at " << recv_at << " in the page";
  }
}

// Receives a whole message as a reduction does: peek, copy out what arrived, consume.
void peek_message(Link& link, char* dest, size_t n) {
  Transfer t = Transfer::recv_message(link, nullptr, n);
  Progress progress(Deadline::after(std::chrono::seconds(20)), "peek");
  while (!t.complete()) {
    size_t available = 0;
    const char* at = progress.peek_recv(t, &available);
    size_t k = std::min(available, n - t.done);
    std::memcpy(dest + t.done, at, k);
    progress.consume_recv(t, k);
    if (k == 0) progress.idle(&t, 1);
  }
}

// Whole messages (Transfer::send_message / recv_message) are framed on TCP from
// kFramedMin bytes: a pad goes before them. Mixed with plain transfers, received by
// try_recv or by peek, from and into any page offset, and sent as a ring does (a send
// whose size grows up to the message), every byte still arrives in order.
TEST(TcpLink, WholeMessagesArriveIntactAmongPlainTransfers) {
  LinkPair p = make_tcp_pair();
  const size_t big = (size_t{3} << 20) + 8;
  struct Message {
    size_t bytes, send_at, recv_at;
    bool whole, peek = false, growing = false;
  };
  const Message messages[] = {
      {100, 0, 0, false},
      {TcpLink::kFramedMin, 0, 0, true},
      {big, 0, 0, true},
      {TcpLink::kFramedMin - 8, 64, 0, true},  // too small to be framed
      {size_t{1} << 20, 0, 2112, true, true},
      {200 << 10, 0, 0, false},
      {big, 64, 1000, true, false, true},
      {TcpLink::kFramedMin + 8, 4090, 0, true, true, true},
  };
  auto out = pages(big), in = pages(big);
  for (const Message& m : messages) {
    std::vector<char> data = payload(static_cast<int>(m.bytes % 97), m.whole, m.bytes);
    std::memcpy(out.get() + m.send_at, data.data(), m.bytes);
    char* dest = in.get() + m.recv_at;
    std::thread reader([&] {
      if (m.peek) return peek_message(*p.b, dest, m.bytes);
      Transfer t = m.whole ? Transfer::recv_message(*p.b, dest, m.bytes)
                           : Transfer::recv(*p.b, dest, m.bytes);
      Progress(Deadline::after(std::chrono::seconds(20)), "read").finish(&t, 1);
    });
    const char* src = out.get() + m.send_at;
    size_t first = m.growing ? 0 : m.bytes;
    Transfer t = m.whole ? Transfer::send_message(*p.a, src, first, m.bytes)
                         : Transfer::send(*p.a, src, first);
    Progress progress(Deadline::after(std::chrono::seconds(20)), "write");
    for (size_t step = 1000; t.size < m.bytes; step *= 2) {  // as a ring's send grows
      t.size = std::min(m.bytes, t.size + step);
      progress.poll(&t, 1);
    }
    progress.finish(&t, 1);
    reader.join();
    EXPECT_EQ(std::memcmp(dest, data.data(), m.bytes), 0)
        << m.bytes << " bytes sent from " << m.send_at << ", received at " << m.recv_at;
  }
  EXPECT_FALSE(p.b->buffered_input());
}

// The pad on the wire: magic "CHPD", zero, the message's size, zeros, then the message.
TEST(TcpLink, FramedMessageIsPaddedOnTheWire) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  TcpLink link(1, net::Fd(sv[0]), "socketpair");
  net::Fd raw(sv[1]);
  const size_t n = TcpLink::kFramedMin, total = TcpLink::kPadBytes + n;
  std::vector<char> data = payload(1, 2, n), wire(total);
  std::thread reader([&] {
    for (size_t got = 0; got < total;) {
      ssize_t k = ::read(raw.get(), wire.data() + got, total - got);
      ASSERT_GT(k, 0);
      got += static_cast<size_t>(k);
    }
  });
  Transfer t = Transfer::send_message(link, data.data(), n);
  Progress(Deadline::after(std::chrono::seconds(20)), "write").finish(&t, 1);
  reader.join();
  const unsigned char head[16] = {'C', 'H', 'P', 'D', 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
  EXPECT_EQ(std::memcmp(wire.data(), head, 16), 0);
  EXPECT_TRUE(std::all_of(wire.begin() + 16, wire.begin() + TcpLink::kPadBytes,
                          [](char c) { return c == 0; }));
  EXPECT_EQ(std::memcmp(wire.data() + TcpLink::kPadBytes, data.data(), n), 0);
}

// A receiver that expects a whole message and finds plain bytes, or a message of another
// size, fails with IoError naming both sizes, not with corrupt data.
TEST(TcpLink, MessagesTheEndsDisagreeOnAreAnError) {
  const size_t n = TcpLink::kFramedMin * 2;
  std::vector<char> data = payload(3, 4, n), in(n);
  auto expect_out_of_step = [&](bool send_whole, size_t expected, const char* sent) {
    LinkPair p = make_tcp_pair();
    std::thread writer([&] {
      Transfer t = send_whole ? Transfer::send_message(*p.a, data.data(), n)
                              : Transfer::send(*p.a, data.data(), n);
      try {
        Progress(Deadline::after(std::chrono::seconds(5)), "write").finish(&t, 1);
      } catch (const Error&) {  // the reader may close first
      }
    });
    Transfer t = Transfer::recv_message(*p.b, in.data(), expected);
    try {
      Progress(Deadline::after(std::chrono::seconds(20)), "read").finish(&t, 1);
      ADD_FAILURE() << "no error for " << sent;
    } catch (const IoError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("out of step: this rank expects a message of " +
                          std::to_string(expected) + " bytes, the peer sent " + sent),
                std::string::npos)
          << what;
    }
    p.b.reset();
    writer.join();
  };
  expect_out_of_step(false, n, "no message header");
  expect_out_of_step(true, n / 2, "a message of 131072 bytes");
}

// Time spent in wait_ready while `wake` runs on another thread after a short delay.
template <typename Wake>
std::chrono::milliseconds time_wait(Link& waiter, bool for_send, Wake wake) {
  auto start = Clock::now();
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    wake();
  });
  while (Clock::now() - start < std::chrono::milliseconds(20)) {
    EXPECT_TRUE(waiter.wait_ready(for_send, std::chrono::seconds(5)));  // may return early
  }
  EXPECT_TRUE(waiter.wait_ready(for_send, std::chrono::seconds(5)));
  other.join();
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

TEST(ShmLink, SleeperIsWokenByDataSpaceAndAbort) {
  LinkPair p = make_shm_pair(4096);
  char c = 7;
  // Nothing to read: the peer's send wakes us long before the 5 s slice ends.
  EXPECT_LT(time_wait(*p.b, false, [&] { EXPECT_EQ(p.a->try_send(&c, 1), 1u); }).count(), 2000);
  EXPECT_EQ(p.b->try_recv(&c, 1), 1u);
  // A full ring: the peer's read frees space and wakes the writer.
  std::vector<char> big(4096, 'x');
  ASSERT_EQ(p.a->try_send(big.data(), big.size()), big.size());
  EXPECT_LT(time_wait(*p.a, true, [&] { EXPECT_EQ(p.b->try_recv(big.data(), 10), 10u); }).count(),
            2000);
  // Data pending already: no sleep at all.
  auto start = Clock::now();
  EXPECT_TRUE(p.b->wait_ready(false, std::chrono::seconds(5)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  // Abort from the peer (or another thread) wakes a sleeper that could otherwise not progress.
  LinkPair q = make_shm_pair(4096);
  EXPECT_LT(time_wait(*q.b, false, [&] { q.a->abort({}); }).count(), 2000);
  EXPECT_THROW(q.b->try_recv(&c, 1), IoError);
}

TEST(ShmLink, WaitReadyTimesOutWithoutAWake) {
  LinkPair p = make_shm_pair(4096);
  auto start = Clock::now();
  EXPECT_TRUE(p.b->wait_ready(false, std::chrono::milliseconds(30)));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(25));
}

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Progress spins and yields for about 2 ms on a link without a descriptor, then blocks on
// its futex (or sleeps, on a link that cannot block): a receive that waits 600 ms for its
// peer must not hold a core for it. A waiter that kept spinning or yielding used 597 ms of
// CPU here; its thread's CPU time bounds that, whatever else runs.
TEST(ShmLink, ALongWaitDoesNotHoldItsCore) {
  LinkPair p = make_shm_pair(4096);
  const auto wait = std::chrono::milliseconds(600);
  std::thread peer([&] {
    std::this_thread::sleep_for(wait);
    char c = 9;
    EXPECT_EQ(p.a->try_send(&c, 1), 1u);
  });
  char c = 0;
  double cpu_before = thread_cpu_seconds();
  auto start = Clock::now();
  Transfer t = Transfer::recv(*p.b, &c, 1);
  Progress(Deadline::after(std::chrono::seconds(20)), "a long wait").finish(&t, 1);
  double cpu = thread_cpu_seconds() - cpu_before;
  peer.join();
  EXPECT_EQ(c, 9);
  EXPECT_GE(Clock::now() - start, wait - std::chrono::milliseconds(50));
  EXPECT_LT(cpu, 0.15) << "the waiting thread ran " << cpu * 1e3 << " ms of CPU in a 600 ms wait";
}

// The peer owns one counter of each ring and may be broken: a tail beyond the head, or a
// head more than a ring ahead of the tail, must stop the copy, not run past the ring.
TEST(ShmRing, CountersNoRingCanHaveAreAnError) {
  constexpr uint64_t kCap = 4096;
  shm::RingCounters counters;
  std::vector<char> ring(kCap), big(3 * kCap, 'x'), in(3 * kCap);
  shm::RingWriter writer(&counters, ring.data(), kCap);
  shm::RingReader reader(&counters, ring.data(), kCap);
  ASSERT_EQ(writer.write(big.data(), 100), 100u);
  ASSERT_EQ(reader.read(in.data(), 100), 100u);

  counters.tail.store(101);  // the reader "read" a byte that was never written
  try {
    writer.write(big.data(), big.size());
    FAIL() << "a write with the tail beyond the head did not throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("ring corrupted by the peer: head 100, tail 101"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(writer.has_space(), IoError);
  size_t space = 0;
  EXPECT_THROW(writer.reserve(&space), IoError);

  counters.tail.store(100);
  counters.head.store(100 + kCap + 1);  // more unread bytes than the ring holds
  EXPECT_THROW(reader.read(in.data(), in.size()), IoError);
  size_t n = 0;
  EXPECT_THROW(reader.peek(&n), IoError);
  EXPECT_THROW(reader.has_data(), IoError);

  counters.head.store(100 + kCap);  // exactly full is a ring's state
  EXPECT_EQ(reader.read(in.data(), in.size()), kCap);
}

TEST(ShmSegment, RejectsMalformedSegments) {
  net::Fd memfd;
  shm::Segment s = shm::Segment::create(8192, memfd);
  EXPECT_THROW(shm::Segment::map_existing(memfd.get(), 4096), AuthError);   // wrong size
  EXPECT_THROW(shm::Segment::map_existing(memfd.get(), 12288), AuthError);  // not a power of 2
  EXPECT_THROW(shm::Segment::create(1000, memfd), InvalidArgument);
  EXPECT_FALSE(shm::valid_ring_bytes(uint64_t{1} << 31));
}

TEST(TcpLink, ExchangesAndFailsWhenThePeerGoes) {
  LinkPair p = make_tcp_pair();
  exchange(*p.a, *p.b, 0);
  exchange(*p.a, *p.b, 3 << 20);
  p.b->abort("not carried over TCP");
  char c;
  EXPECT_THROW(
      {
        for (int i = 0; i < 1000; ++i) p.a->try_recv(&c, 1);
      },
      IoError);
  EXPECT_EQ(p.a->describe(), "tcp to rank 1 (socketpair)");
}

TEST(Topology, NumbersHostsByLowestRank) {
  std::vector<std::string> hosts = {"b", "a", "b", "c", "a"};
  Topology t2 = compute_topology(2, hosts);
  EXPECT_EQ(t2.local_rank, 1);
  EXPECT_EQ(t2.local_size, 2);
  EXPECT_EQ(t2.cross_rank, 0);
  EXPECT_EQ(t2.cross_size, 3);
  EXPECT_EQ(t2.host_of_rank, (std::vector<int>{0, 1, 0, 2, 1}));
  Topology t4 = compute_topology(4, hosts);
  EXPECT_EQ(t4.local_rank, 1);
  EXPECT_EQ(t4.cross_rank, 1);
  Topology t3 = compute_topology(3, hosts);
  EXPECT_EQ(t3.local_rank, 0);
  EXPECT_EQ(t3.local_size, 1);
  EXPECT_EQ(t3.cross_rank, 2);
}

TEST(Topology, DefaultHostIdNamesTheNetworkNamespace) {
  std::string id = default_host_id();
  EXPECT_NE(id.find("net:["), std::string::npos) << id;
  EXPECT_EQ(id, default_host_id());
  EXPECT_FALSE(detect_local_address("").empty());
  EXPECT_EQ(detect_local_address("127.0.0.1"), "127.0.0.1");
}

TEST(Handshake, HelloRoundTripsAndRejectsGarbage) {
  Hello h;
  h.kind = LinkKind::kShm;
  h.from_rank = 3;
  h.to_rank = 70000;
  h.size = 70001;
  h.ring_bytes = uint64_t{1} << 33;
  h.group = random_token();
  h.token = random_token();
  uint8_t wire[Hello::kWireBytes];
  h.encode(wire);
  Hello back;
  ASSERT_TRUE(back.decode(wire));
  EXPECT_EQ(back.kind, h.kind);
  EXPECT_EQ(back.to_rank, 70000u);
  EXPECT_EQ(back.ring_bytes, h.ring_bytes);
  EXPECT_EQ(back.group, h.group);
  EXPECT_EQ(back.token, h.token);
  wire[0] ^= 1;
  EXPECT_FALSE(back.decode(wire));
  Token t;
  EXPECT_TRUE(parse_token_hex(token_hex(h.token), t));
  EXPECT_EQ(t, h.token);
  EXPECT_FALSE(parse_token_hex("zz", t));
}

TEST(MeshOptions, ParsesKindsAndEnvironment) {
  EXPECT_EQ(parse_transport_kind("shm"), TransportKind::kShm);
  EXPECT_THROW(parse_transport_kind("carrier-pigeon"), InvalidArgument);
  setenv("CHORUS_TRANSPORT", "tcp", 1);
  setenv("CHORUS_HOST_ID", "node7", 1);
  setenv("CHORUS_BIND_ADDRESS", "10.1.2.3", 1);
  setenv("CHORUS_TIMEOUT_SECONDS", "1.5", 1);
  MeshOptions o = MeshOptions::from_env();
  EXPECT_EQ(o.kind, TransportKind::kTcp);
  EXPECT_EQ(o.host_id, "node7");
  EXPECT_EQ(o.bind_address, "10.1.2.3");
  EXPECT_EQ(o.timeout.count(), 1500);
  setenv("CHORUS_STORE_ADDR", "127.0.0.9:29500", 1);
  EXPECT_EQ(MeshOptions::from_env().store_host, "127.0.0.9");
  unsetenv("CHORUS_STORE_ADDR");
  setenv("CHORUS_TRANSPORT", "nope", 1);
  EXPECT_THROW(MeshOptions::from_env(), InvalidArgument);
  for (const char* v :
       {"CHORUS_TRANSPORT", "CHORUS_HOST_ID", "CHORUS_BIND_ADDRESS", "CHORUS_TIMEOUT_SECONDS"}) {
    unsetenv(v);
  }
}

}  // namespace
}  // namespace chorus::transport
