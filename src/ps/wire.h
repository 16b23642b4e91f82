// Messages between PsClient and ParameterServer (docs/wire_format.md, "Parameter server").
// Each message is a 20-byte little-endian header
//   magic u32 ("CHPS") | version u16 | type u16 | meta_bytes u32 | bulk_bytes u64
// then `meta_bytes` of small fields (rendezvous PayloadWriter encoding) and `bulk_bytes` of
// float32 arrays. receive() reads the header and the meta only (meta_bytes is capped
// before anything is allocated); the caller checks bulk_bytes against the layout and then
// receives the floats straight into their destination with recv_bulk(), so a large array
// is never copied through a std::string.
// Thread safety: none; one reader and one writer per descriptor at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/deadline.h"

namespace chorus::ps::wire {

constexpr uint32_t kMagic = 0x53504843;  // bytes "CHPS" read as little-endian
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 20;
constexpr uint32_t kMaxMetaBytes = 64u << 20;
constexpr const char* kPurpose = "ps";  // bound into the handshake MAC

enum class Type : uint16_t {
  kCreate = 1,  // meta: layout part, config          bulk: initial values
  kLayout = 2,  // -> meta: u8 created [, part, config]
  kPull = 3,    // meta: i64 min_version, i64 wait_ms -> meta: i64 version, bulk: values
  kPush = 4,  // meta: i64 version, f64 lr          bulk: gradients -> meta: u8 applied, i64 version
  kStats = 5,     // -> meta: i64 version, applied, dropped, elements
  kSave = 6,      // -> bulk: the state file
  kRestore = 7,   // bulk: a state file
  kShutdown = 8,  // -> empty; the server's wait() returns
  kOk = 100,
  kTimeout = 101,   // meta: str message (a pull's min_version was not reached in time)
  kError = 102,     // meta: str message (the request broke a rule)
  kStopping = 103,  // meta: str message (the server is shutting down)
};

struct Header {
  Type type = Type::kOk;
  uint32_t meta_bytes = 0;
  uint64_t bulk_bytes = 0;
};

// A piece of a message's bulk section.
struct Piece {
  const void* data;
  size_t bytes;
};
struct Slot {
  void* data;
  size_t bytes;
};

// Sends header, meta and the pieces in order (gathered, few system calls).
void send(int fd, Type type, const std::string& meta, const std::vector<Piece>& bulk,
          Deadline deadline, const char* what);
// Reads a header and its meta. Returns false when the peer closed cleanly before the first
// byte. IoError on a bad magic or version, or meta_bytes over kMaxMetaBytes. Memory for
// meta grows with the bytes received (net::recv_growing), whatever the header announced.
bool receive(int fd, Deadline deadline, const char* what, Header& header, std::string& meta);
// Receives exactly the slots' bytes, in order (scattered, few system calls).
void recv_bulk(int fd, const std::vector<Slot>& slots, Deadline deadline, const char* what);
// Receives `n` floats into `out` (resized to n). Memory the vector does not hold yet grows
// with the bytes received, as for meta, so a peer that announces a large array and stalls
// costs about what it sent; a vector that already holds n floats receives in place.
void recv_floats_growing(int fd, std::vector<float>& out, size_t n, Deadline deadline,
                         const char* what);

}  // namespace chorus::ps::wire
