// A checkpoint's MANIFEST, parsed as untrusted text. Its last line is a SHA-256 of the rest,
// which random bytes never match; so the input is parsed as it is and once more with that
// line recomputed, which lets the fuzzer reach every other line's checks. What parses must
// encode back to the same text.
#include <cstdlib>

#include "fuzz_support.h"
#include "train/checkpoint/manifest.h"

namespace chorus::fuzz {
namespace {

// The input with its checksum line (if any) replaced by the right one.
std::string with_checksum(std::string_view text) {
  size_t line = text.rfind("manifest-sha256 ");
  std::string body(text.substr(0, line == std::string_view::npos ? text.size() : line));
  return body + "manifest-sha256 " + ckpt::sha256_hex(body) + "\n";
}

void parse(const std::string& text) {
  ckpt::Manifest manifest;
  try {
    manifest = ckpt::parse_manifest(text, "fuzz");
  } catch (const Error&) {
    return;
  }
  if (ckpt::encode_manifest(manifest) != text) std::abort();
}

}  // namespace
}  // namespace chorus::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = chorus::fuzz::as_view(data, size);
  chorus::fuzz::parse(std::string(text));
  chorus::fuzz::parse(chorus::fuzz::with_checksum(text));
  return 0;
}
