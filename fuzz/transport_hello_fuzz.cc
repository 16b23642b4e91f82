// What a rank reads from a peer while the mesh forms, past the handshake: the 64-byte
// Hello and the 8-byte reply, a token in hex (as published in the store), and the shared-
// memory segment a connecting rank passes (size, seals and header checked before use).
// Input: 64 bytes of Hello, 8 of reply, then the segment's first bytes; the token text is
// the whole input.
#include <fcntl.h>

#include <cstring>

#include "fuzz_support.h"
#include "transport/handshake.h"
#include "transport/shm/mapping.h"
#include "transport/shm/shm_segment.h"

namespace chorus::fuzz {
namespace {

using transport::Hello;

// A sealed memfd of the size a segment of `ring_bytes` needs, or a page short when
// `short_by_a_page`, starting with `header` bytes: what a hostile peer could pass.
void map_segment(uint64_t ring_bytes, bool short_by_a_page, std::string_view header) {
  size_t size = transport::shm::kHeaderBytes + 2 * ring_bytes - (short_by_a_page ? 4096 : 0);
  net::Fd fd = transport::shm::create_sealed_memfd("chorus-fuzz", size);
  size_t n = std::min(header.size(), transport::shm::kHeaderBytes);
  if (::pwrite(fd.get(), header.data(), n, 0) != static_cast<ssize_t>(n)) std::abort();
  // The hello claims a ring size; a hostile peer may claim any, the segment stays small.
  expect_chorus_errors([&] { transport::shm::Segment::map_existing(fd.get(), ring_bytes); });
}

}  // namespace
}  // namespace chorus::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  using transport::Hello;
  transport::Token token;
  transport::parse_token_hex(std::string(fuzz::as_view(data, size)), token);
  if (size < Hello::kWireBytes + transport::kReplyBytes) return 0;
  Hello hello;
  if (hello.decode(data)) {
    uint8_t again[Hello::kWireBytes];
    hello.encode(again);  // what decodes must encode to the same fields
    Hello back;
    if (!back.decode(again) || back.ring_bytes != hello.ring_bytes ||
        back.from_rank != hello.from_rank || back.token != hello.token) {
      std::abort();
    }
    transport::token_hex(hello.token);
  }
  transport::HelloStatus status;
  if (transport::decode_reply(data + Hello::kWireBytes, status)) {
    transport::hello_status_text(status);
  }
  // Only small claimed rings are mapped here: the 1 GiB bound itself is valid_ring_bytes.
  uint64_t ring_bytes = hello.ring_bytes;
  if (ring_bytes > (uint64_t{64} << 10)) {
    if (transport::shm::valid_ring_bytes(ring_bytes) && ring_bytes > (uint64_t{1} << 30)) {
      std::abort();
    }
    return 0;
  }
  size_t at = Hello::kWireBytes + transport::kReplyBytes;
  bool short_segment = ring_bytes >= 4096 && (data[at - 1] & 1);
  fuzz::map_segment(ring_bytes, short_segment, fuzz::as_view(data + at, size - at));
  return 0;
}
