// The MANIFEST of a checkpoint directory: a small text file, parsed as untrusted input.
//
//   chorus-checkpoint 1                      format version
//   step 100
//   files 2
//   file model.bin 1048576 sha256 <64 hex>   one line per file, names ascending
//   file rng 16 sha256 <64 hex>
//   manifest-sha256 <64 hex>                 SHA-256 of every byte before this line
//
// Numbers are canonical decimal (no sign, no leading zeros). Anything else — a wrong
// count, an unknown line, a bad name, a number out of range, a missing final newline, a
// checksum that differs — is an InvalidArgument naming the checkpoint and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::ckpt {

constexpr int kFormatVersion = 1;
constexpr size_t kMaxManifestBytes = 16u << 20;
constexpr size_t kMaxFiles = 65536;
constexpr size_t kMaxNameBytes = 255;
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 50;  // 1 PiB: a bound, not a plan
constexpr char kManifestName[] = "MANIFEST";

struct FileEntry {
  std::string name;
  uint64_t size = 0;
  std::string sha256_hex;
};

struct Manifest {
  int64_t step = 0;
  std::vector<FileEntry> files;  // strictly ascending by name
};

// Lowercase hex SHA-256 of `bytes` (OpenSSL).
std::string sha256_hex(std::string_view bytes);

// [A-Za-z0-9._-]+, at most kMaxNameBytes, not ".", "..", or kManifestName.
bool valid_file_name(std::string_view name);

// Canonical decimal (no sign, no leading zero unless "0") no larger than `max`.
std::optional<uint64_t> parse_decimal(std::string_view text, uint64_t max);

std::string encode_manifest(const Manifest& manifest);
// `where` (the checkpoint path) is for messages.
Manifest parse_manifest(std::string_view text, const std::string& where);

}  // namespace chorus::ckpt
