// A Link to a rank on the same host through a shared-memory segment (see shm_segment.h):
// one SPSC ring per direction, so try_send/try_recv are a memcpy plus an atomic or two.
// A Unix socket to the peer stays open for liveness only: check_alive() sees the peer's
// end close (exit, crash, SIGKILL) as EOF/POLLHUP. abort() sets the segment's shared
// 'aborted' flag, which the peer's next try_* notices without any system call, and rings
// both doorbells so that a side asleep in wait_ready() notices at once.
//
// Single copy: the liveness socket also names the peer's process (SO_PEERCRED), whose
// memory PeerMemory::read / write copy with process_vm_readv / process_vm_writev once
// PeerMemory::probe has checked, through the segment header's probe addresses, that the
// kernel allows it and that the pid is really the peer's.
#pragma once

#include <atomic>
#include <string>

#include "transport/link.h"
#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_segment.h"
#include "util/net.h"

namespace chorus::transport {

class ShmLink : public Link, public PeerMemory {
 public:
  // `side` is 0 for the end that created the segment, 1 for the other. `liveness` is the
  // connected Unix socket to the peer (owned). `rank` is this rank, for messages.
  ShmLink(int rank, int peer, int side, shm::Segment segment, net::Fd liveness);
  ~ShmLink() override;

  size_t try_send(const void* data, size_t n) override {
    if (broken()) throw_broken("send");
    return writer_.write(data, n);
  }
  size_t try_recv(void* data, size_t n) override {
    if (broken()) throw_broken("receive");
    return reader_.read(data, n);
  }
  const char* peek_recv(size_t* available) override {
    if (broken()) throw_broken("receive");
    return reader_.peek(available);
  }
  void consume_recv(size_t n) override { reader_.consume(n); }
  char* reserve_send(size_t* available) override {
    if (broken()) throw_broken("send");
    return writer_.reserve(available);
  }
  void commit_send(size_t n) override { writer_.commit(n); }
  PeerMemory* peer_memory() override { return this; }
  bool probe() override;
  void read(const PeerCopy* pieces, size_t n) override { copy(pieces, n, false); }
  void write(const PeerCopy* pieces, size_t n) override { copy(pieces, n, true); }
  int open_file(int remote_fd) override;
  int poll_fd() const override { return -1; }
  bool buffered_input() const override { return reader_.has_data(); }
  bool wait_ready(bool for_send, std::chrono::nanoseconds max_wait) override;
  void check_alive() override;
  void abort(std::string_view reason) noexcept override;
  std::string describe() const override;

 private:
  bool broken() const {
    return locally_aborted_.load(std::memory_order_relaxed) ||
           segment_.header()->aborted_by.load(std::memory_order_relaxed) != 0;
  }
  [[noreturn]] void throw_broken(const char* op) const;
  std::string peer_abort_reason() const;
  // read() (to_peer false) or write() (true).
  void copy(const PeerCopy* pieces, size_t n, bool to_peer);

  int rank_;
  int side_;
  shm::Segment segment_;
  net::Fd liveness_;
  int peer_pid_ = 0;        // 0: unknown (no single copy)
  int peer_readable_ = -1;  // probe()'s answer: -1 not probed yet, 0 no, 1 yes
  shm::RingWriter writer_;
  shm::RingReader reader_;
  std::atomic<bool> locally_aborted_{false};  // abort() may come from any thread
};

}  // namespace chorus::transport
