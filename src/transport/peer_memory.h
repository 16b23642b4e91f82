// What a link to a rank on the same host may offer besides its byte stream: reading and
// writing the peer's memory and opening the files behind its descriptors. Only
// shared-memory links offer it (Link::peer_memory()); algorithms that need it ask for it
// and fall back to the byte stream without it, so they never depend on a transport's type.
//
// Thread safety: as the Link that offers it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus::transport {

// One piece of a single-copy read or write (PeerMemory::read / write).
struct PeerCopy {
  char* local;
  uintptr_t remote;  // an address in the peer's process
  size_t len;
};

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;

  // Whether read() and write() work: the kernel lets this process read the peer's with
  // process_vm_readv (same user, no Yama/seccomp refusal; process_vm_writev asks the same
  // permission) and the pid is really the peer's.
  // Only valid once the peer's end of the link exists (after any exchange with it); the
  // answer may be cached. Never throws.
  virtual bool probe() = 0;
  // Copies each piece's `len` bytes at address `remote` of the peer's process to `local`.
  // Throws IoError when a read fails or comes up short (the peer died, or a bad address).
  // REQUIRES: probe() returned true.
  virtual void read(const PeerCopy* pieces, size_t n) = 0;
  // Copies each piece's `len` bytes at `local` to address `remote` of the peer's process.
  // Throws IoError as read(). REQUIRES: probe() returned true, and the peer named those
  // addresses as its own output for a call both sides checked they agree on: nothing else
  // keeps this from overwriting the peer's memory anywhere.
  virtual void write(const PeerCopy* pieces, size_t n) = 0;
  // Opens the file behind descriptor `remote_fd` of the peer's process (through
  // /proc/<pid>/fd: shared memory the peer created) and returns a new descriptor of it,
  // owned by the caller. Throws IoError when the kernel refuses or the peer has no such
  // descriptor. REQUIRES: probe() returned true.
  virtual int open_file(int remote_fd) = 0;
};

}  // namespace chorus::transport
