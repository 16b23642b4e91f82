// A Link over a connected stream socket (TCP, or a Unix socketpair in tests).
//
// Two staging buffers of the link's own. Caller memory near a page boundary (as large
// buffers from posix_memalign or mmap are) is sent from the outgoing one (grown with the
// caller's sends, up to 2 MiB): the kernel copies from it at an offset in its page chosen
// to be fast, where page-aligned caller memory makes that copy up to twice as slow, and
// the user-space copy costs less than the difference (docs/algorithms.md). OpenMPI's TCP
// BTL bounces through its fragment buffers too. Caller memory elsewhere in its page goes
// to the kernel as it is. Small receives, and reductions (peek_recv, which read received
// bytes where the kernel put them), use the incoming one (256 KiB, allocated at first
// use); large receives go straight into the caller's memory, wherever it lies.
//
// Whole messages of kFramedMin bytes or more (Link::begin_message: the collectives'
// exchanges) go out without staging, after a pad of kPadBytes that names their size: the
// pad moves them off the page offsets where the kernel's copies are slow, on both ends,
// and lets the receiver check that both ends agree on the message (docs/wire_format.md).
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "transport/link.h"
#include "util/net.h"

namespace chorus::transport {

class TcpLink : public Link {
 public:
  // Takes ownership of a connected socket (made non-blocking, without Nagle's delay, here).
  // `label` describes the remote end, e.g. "10.0.0.2:4431".
  TcpLink(int peer, net::Fd fd, std::string label);

  // Sends up to kSendStagingBytes of `data` — a framed message's straight after its pad;
  // otherwise through the outgoing staging buffer when `data` is near a page boundary (or
  // continues the bytes staged last time, when `data` is where those left off) — and
  // returns what the kernel accepted.
  size_t try_send(const void* data, size_t n) override;
  // Copies from the incoming staging buffer, refilling it from the kernel when empty; a
  // receive of 64 KiB or more, with nothing staged, is a recv() straight into `data`.
  size_t try_recv(void* data, size_t n) override;
  const char* peek_recv(size_t* available) override;
  // Messages of kFramedMin bytes or more are framed: see the top of this file.
  void begin_message(bool is_send, size_t bytes) override;
  void consume_recv(size_t n) override;
  bool buffered_input() const override { return in_begin_ < in_end_; }
  int poll_fd() const override { return fd_.get(); }
  void check_alive() override {}
  // A TCP link cannot carry `reason`: the peer sees the connection shut down, and finds the
  // reason in the abort notes, when the mesh has them (transport/abort_notes.h).
  void abort(std::string_view reason) noexcept override;
  bool set_abort_notes(AbortNotes* notes) override {
    abort_notes_ = notes;
    return true;
  }
  std::string describe() const override;

  // Bytes handed to one send(): on loopback, 1-2 MiB in one call made 2-rank allreduces
  // of 1-4 MiB 1.2-1.3x faster than 256 KiB calls (docs/algorithms.md). The buffer grows
  // to the largest send so far, so a link that carries small messages stays small.
  static constexpr size_t kSendStagingBytes = size_t{2} << 20;
  static constexpr size_t kRecvStagingBytes = size_t{256} << 10;
  // Framing (docs/wire_format.md): the smallest framed message, and the pad before it,
  // which puts the message this far into the kernel's socket pages.
  static constexpr size_t kFramedMin = size_t{64} << 10;
  static constexpr size_t kPadBytes = 1088;
  static constexpr uint32_t kPadMagic = 0x44504843;  // "CHPD"

 private:
  // Throws IoError: `what` failed, because this rank aborted the link, or with the reason
  // the peer left in the abort notes (waiting for it briefly) when it closed or reset.
  [[noreturn]] void throw_broken(const std::string& what, bool peer_gone) const;

  // Makes unread bytes available in the incoming buffer (a recv when it is empty, or when
  // fewer than an element's worth remain at its end). Throws IoError as try_recv.
  void fill();
  ssize_t recv_some(char* at, size_t n);
  // What the kernel accepted of n bytes at `at` (0 when the socket is full).
  size_t send_some(const char* at, size_t n);
  size_t send_iov(iovec* iov, size_t count);
  size_t send_staged();
  // The next bytes of a framed message, after what is left of its pad.
  size_t send_framed(const char* src, size_t n);
  // Reads what is left of the pad before a framed message (from the incoming staging, then
  // exactly the rest from the kernel, so that the message itself can be received straight
  // into the caller's memory). False while part of it has not arrived; IoError when the pad
  // is not one, or names another size.
  bool take_pad();

  // `bytes` at a chosen offset in a page.
  class Staging {
   public:
    Staging(size_t offset, size_t bytes);
    char* data() const { return data_; }
    size_t size() const { return size_; }

   private:
    struct Free {
      void operator()(char* p) const { std::free(p); }
    };
    std::unique_ptr<char, Free> base_;
    char* data_;
    size_t size_;
  };
  // The incoming staging, allocated at first use.
  Staging& incoming();

  net::Fd fd_;
  std::string label_;
  AbortNotes* abort_notes_ = nullptr;
  std::atomic<bool> locally_aborted_{false};
  std::optional<Staging> out_, in_;
  const char* out_src_ = nullptr;  // the caller's address of out_[0]
  size_t out_staged_ = 0, out_sent_ = 0;
  size_t in_begin_ = 0, in_end_ = 0;  // unread bytes: in_[in_begin_, in_end_)
  // Framing: the pads being sent and received (kPadBytes done: none pending), the bytes of
  // the outgoing framed message not yet sent, and the size the incoming one must have.
  std::array<char, kPadBytes> pad_out_{}, pad_in_{};
  size_t pad_out_done_ = kPadBytes, pad_in_done_ = kPadBytes;
  size_t framed_left_ = 0;
  uint64_t framed_expected_ = 0;
};

}  // namespace chorus::transport
