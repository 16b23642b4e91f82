// Memory that the ranks on one host share by mapping it: a sealed anonymous memfd holding a
// header page (magic, version, a random nonce, the data size) and then the data. Its creator
// keeps the descriptor open until every peer has opened the file through its link
// (PeerMemory::open_file) and checked the nonce, which the creator sends over the
// authenticated links: proof that the file opened is the one announced. Nothing appears in
// /dev/shm, and the kernel frees the memory with its last mapping, also after SIGKILL.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/shm/mapping.h"
#include "util/net.h"

namespace chorus::transport::shm {

// What the creator tells its peers about a region: 32 bytes, the same on every machine.
struct RegionIdentity {
  int32_t fd = -1;  // the creator's descriptor (valid until close_descriptor())
  uint32_t reserved = 0;
  uint64_t data_bytes = 0;
  uint64_t nonce[2] = {0, 0};
};
static_assert(sizeof(RegionIdentity) == 32, "sent as bytes");

constexpr uint64_t kRegionMagic = 0x6e6f6967655273ull;  // "sRegion"
constexpr uint32_t kRegionVersion = 1;
constexpr size_t kRegionHeaderBytes = 4096;
// The largest region: far beyond any host's memory, small enough that sizes never overflow.
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 44;

class Region {
 public:
  // Creates, sizes, seals and maps a region with `data_bytes` (1 .. kMaxRegionBytes) of
  // zeroed data, its pages populated now or on first touch (mapping.h). Throws
  // InvalidArgument for a bad size, IoError when memory is short.
  static Region create(size_t data_bytes, Pages pages = Pages::kPopulated);
  // Maps a peer's region from `file` (opened with PeerMemory::open_file) after checking its
  // size, seals and header against `expected`. Throws AuthError when they differ.
  static Region map_peer(net::Fd file, const RegionIdentity& expected,
                         Pages pages = Pages::kPopulated);

  char* data() const {
    return mapping_.data() == nullptr ? nullptr : mapping_.data() + kRegionHeaderBytes;
  }
  size_t data_bytes() const { return identity_.data_bytes; }
  const RegionIdentity& identity() const { return identity_; }
  // The creator's descriptor is no longer needed once every peer has opened the file.
  void close_descriptor();

 private:
  Mapping mapping_;
  RegionIdentity identity_;
  net::Fd fd_;  // the creator's, until close_descriptor()
};

}  // namespace chorus::transport::shm
