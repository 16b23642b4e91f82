// A Link is a reliable, ordered, full-duplex byte stream to one peer rank. Algorithms in
// comm/ see only this interface (and Progress, which drives many links at once), never a
// socket or a shared-memory segment, so a new transport needs no change in the algorithms.
//
// Thread safety: a Link is driven by one thread at a time (the communicator's caller);
// abort() may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "chorus/error.h"

namespace chorus::transport {

// One piece of a single-copy read (Link::read_peer_memory).
struct PeerCopy {
  char* local;
  uintptr_t remote;  // an address in the peer's process
  size_t len;
};

class Link {
 public:
  explicit Link(int peer) : peer_(peer) {}
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int peer() const { return peer_; }

  // Non-blocking: moves up to n bytes and returns how many moved (0 when it would block).
  // Throws IoError when the peer closed, died or aborted, or after abort().
  virtual size_t try_send(const void* data, size_t n) = 0;
  virtual size_t try_recv(void* data, size_t n) = 0;

  // A descriptor that poll() reports readable/writable when try_recv/try_send can make
  // progress, or -1 when the link has none and must be polled by calling try_* (shared
  // memory). Progress sleeps in poll() only when every waiting link has a descriptor.
  virtual int poll_fd() const = 0;

  // Blocks until the given direction of this link may progress (for_send: try_send would
  // accept a byte; otherwise try_recv / peek_recv would yield one), the link breaks, or
  // `max_wait` passes, whichever is first. It may also return early for no reason, so callers
  // re-check. Returns false, at once, when the link cannot block this way (then Progress
  // falls back to poll_fd() or to spinning and sleeping). Never throws: a broken link is
  // reported by the next try_* or check_alive(). For links without a descriptor.
  virtual bool wait_ready(bool for_send, std::chrono::nanoseconds max_wait) {
    (void)for_send;
    (void)max_wait;
    return false;
  }

  // Zero-copy receive: the next received bytes, in place in the link's own memory.
  // Returns nullptr when the link does not lend its memory (then use try_recv; whether a
  // link does never changes). Otherwise returns where the next byte is or will be and sets
  // *available to how many bytes are readable there contiguously — possibly 0, and possibly
  // fewer than have arrived (the rest follows elsewhere, e.g. after a ring's wrap point, so
  // a multi-byte element may be cut there). The bytes stay valid and unchanged until
  // consume_recv(); try_recv must not be mixed in between. Throws IoError like try_recv.
  virtual const char* peek_recv(size_t* available) {
    *available = 0;
    return nullptr;
  }
  // Hands back the first n bytes of the last peek_recv(), as if try_recv had read them.
  // REQUIRES: peek_recv returned non-null and n <= its *available.
  virtual void consume_recv(size_t n) { (void)n; }

  // Zero-copy send, the mirror of peek_recv: where the next sent bytes go, in the link's own
  // memory, with *available set to how many may be written there contiguously (possibly
  // 0). Returns nullptr when the link does not lend its memory (use try_send). The caller
  // writes there, then commit_send(n) sends the first n; try_send must not be mixed in
  // between. Throws IoError like try_send.
  virtual char* reserve_send(size_t* available) {
    *available = 0;
    return nullptr;
  }
  // REQUIRES: reserve_send returned non-null and n <= its *available.
  virtual void commit_send(size_t n) { (void)n; }

  // Single-copy access to the peer's memory: true when read_peer_memory works on this link
  // (shared memory, when the kernel lets this process read the peer's with
  // process_vm_readv: same user, no Yama/seccomp refusal). Only valid once the peer's end of
  // the link exists (after any exchange with it); the answer may be cached. Never throws.
  virtual bool probe_peer_memory() { return false; }
  // Copies each piece's `len` bytes at address `remote` of the peer's process to `local`.
  // Throws IoError when a read fails or comes up short (the peer died, or a bad address).
  // REQUIRES: probe_peer_memory() returned true.
  virtual void read_peer_memory(const PeerCopy* pieces, size_t n) {
    (void)pieces;
    CHORUS_THROW(IoError, "reading ", n, " pieces of the peer's memory over ", describe(),
                 ": this link cannot");
  }

  // Opens the file behind descriptor `remote_fd` of the peer's process (through
  // /proc/<pid>/fd, shared memory the peer created) and returns a new descriptor of it, owned
  // by the caller. Throws IoError when the kernel refuses or the peer has no such descriptor.
  // REQUIRES: probe_peer_memory() returned true (the pid is the peer's).
  virtual int open_peer_file(int remote_fd) {
    CHORUS_THROW(IoError, "opening descriptor ", remote_fd, " of the peer over ", describe(),
                 ": this link cannot");
  }

  // Called by idle waits, at most about once a millisecond; throws IoError when the peer
  // is known to be gone (a link without a descriptor has no other way to find out).
  virtual void check_alive() = 0;

  // Breaks the link for good: later calls on both ends throw IoError soon after. Used when
  // a collective fails so that every other rank stops waiting within seconds.
  virtual void abort() noexcept = 0;

  // "tcp to rank 3 (10.0.0.2:4431)" — for error messages.
  virtual std::string describe() const = 0;

 private:
  int peer_;
};

}  // namespace chorus::transport
