// A Link is a reliable, ordered, full-duplex byte stream to one peer rank. Algorithms in
// comm/ see only this interface (and Progress, which drives many links at once), never a
// socket or a shared-memory segment, so a new transport needs no change in the algorithms.
// What only some links can do besides the stream — read a peer's memory — is a separate
// capability, PeerMemory, that a link may offer.
//
// Thread safety: a Link is driven by one thread at a time (the communicator's caller);
// abort() may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "chorus/error.h"
#include "transport/abort_notes.h"
#include "transport/peer_memory.h"

namespace chorus::transport {

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
  // Whether received bytes wait in the link's own memory: a shared-memory ring, or a TCP
  // link's staging (taken from the kernel already, so poll_fd() does not report them, and
  // waiters must not sleep). Bytes a peer sent before it exited are still received.
  virtual bool buffered_input() const { return false; }

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

  // Called (through Progress) before the first byte of a transfer that carries a whole
  // message of `bytes` (Transfer::message), which the peer moves as one message of the same
  // size. A link may frame such messages: TcpLink pads large ones (docs/wire_format.md).
  // Throws IoError like try_send / try_recv.
  virtual void begin_message(bool is_send, size_t bytes) {
    (void)is_send;
    (void)bytes;
  }

  // The peer-memory capability (transport/peer_memory.h): shared-memory links to a peer
  // on this host have it, TCP links do not (nullptr). Owned by the link.
  virtual PeerMemory* peer_memory() { return nullptr; }

  // Called by idle waits, at most about once a millisecond; throws IoError when the peer
  // is known to be gone (a link without a descriptor has no other way to find out).
  virtual void check_alive() = 0;

  // Breaks the link for good: later calls on both ends throw IoError soon after. Used when
  // a collective fails so that every other rank stops waiting within seconds. `reason` (this
  // rank's error, or empty) reaches the peer's error where the link can carry it (shm).
  virtual void abort(std::string_view reason) noexcept = 0;
  // For a link that cannot carry a reason: where to look up the one its peer left when the
  // peer breaks the link (transport/abort_notes.h). Returns whether the link uses `notes`
  // (which must outlive it); set once, before the link is used.
  virtual bool set_abort_notes(AbortNotes* notes) {
    (void)notes;
    return false;
  }

  // "tcp to rank 3 (10.0.0.2:4431)" — for error messages.
  virtual std::string describe() const = 0;

 private:
  int peer_;
};

}  // namespace chorus::transport
