#include "train/checkpoint/manifest.h"

#include <openssl/evp.h>

#include <limits>

#include "chorus/error.h"

namespace chorus::ckpt {
namespace {

constexpr char kMagic[] = "chorus-checkpoint";
constexpr char kChecksumKey[] = "manifest-sha256";
constexpr size_t kHexDigestChars = 64;

[[noreturn]] void corrupt(const std::string& where, const std::string& why) {
  CHORUS_THROW(InvalidArgument, "checkpoint '", where, "': MANIFEST is corrupt: ", why);
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  size_t start = 0;
  for (;;) {
    size_t space = line.find(' ', start);
    words.push_back(line.substr(start, space - start));
    if (space == std::string_view::npos) return words;
    start = space + 1;
  }
}

bool is_hex_digest(std::string_view text) {
  if (text.size() != kHexDigestChars) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Hands out the lines of the manifest body one at a time.
class LineReader {
 public:
  LineReader(std::string_view body, const std::string& where) : rest_(body), where_(where) {}

  // The next line split into words; corrupt() unless it has `count` words, the first
  // being `key`.
  std::vector<std::string_view> expect(std::string_view key, size_t count) {
    if (rest_.empty()) corrupt(where_, "ends before the '" + std::string(key) + "' line");
    size_t end = rest_.find('\n');  // the body always ends with '\n'
    std::string_view line = rest_.substr(0, end);
    rest_.remove_prefix(end + 1);
    ++line_number_;
    auto words = split_words(line);
    if (words.size() != count || words[0] != key) {
      corrupt(where_, "line " + std::to_string(line_number_) + " is not a '" + std::string(key) +
                          "' line: '" + std::string(line.substr(0, 80)) + "'");
    }
    return words;
  }
  bool done() const { return rest_.empty(); }
  int line_number() const { return line_number_; }

 private:
  std::string_view rest_;
  const std::string& where_;
  int line_number_ = 0;
};

uint64_t number(std::string_view text, uint64_t max, const char* what, const std::string& where) {
  auto value = parse_decimal(text, max);
  if (!value)
    corrupt(where, std::string("bad ") + what + " '" + std::string(text.substr(0, 40)) + "'");
  return *value;
}

FileEntry parse_file_line(LineReader& lines, const std::string& where) {
  auto words = lines.expect("file", 5);
  FileEntry entry;
  if (!valid_file_name(words[1])) {
    corrupt(where, "bad file name '" + std::string(words[1].substr(0, 40)) + "'");
  }
  entry.name = std::string(words[1]);
  entry.size = number(words[2], kMaxFileBytes, "file size", where);
  if (words[3] != "sha256" || !is_hex_digest(words[4])) {
    corrupt(where, "bad checksum of file '" + entry.name + "'");
  }
  entry.sha256_hex = std::string(words[4]);
  return entry;
}

// Splits off the last line and checks it is the SHA-256 of everything before it.
std::string_view verified_body(std::string_view text, const std::string& where) {
  if (text.empty() || text.back() != '\n') corrupt(where, "truncated (no final newline)");
  size_t last = text.rfind('\n', text.size() - 2);
  if (last == std::string_view::npos) corrupt(where, "has no checksum line");
  std::string_view body = text.substr(0, last + 1);
  auto words = split_words(text.substr(last + 1, text.size() - last - 2));
  if (words.size() != 2 || words[0] != kChecksumKey || !is_hex_digest(words[1])) {
    corrupt(where, "the last line is not 'manifest-sha256 <hex>' (truncated?)");
  }
  if (words[1] != sha256_hex(body)) {
    corrupt(where, "its SHA-256 differs from the one it records (modified or damaged)");
  }
  return body;
}

// The first line names the format; a version we do not know is reported as such rather
// than as a checksum mismatch.
void check_version(std::string_view text, const std::string& where) {
  auto words = split_words(text.substr(0, text.find('\n')));
  if (words.size() != 2 || words[0] != kMagic) corrupt(where, "not a chorus checkpoint manifest");
  auto version = parse_decimal(words[1], std::numeric_limits<int>::max());
  if (!version || *version != kFormatVersion) {
    CHORUS_THROW(InvalidArgument, "checkpoint '", where, "': MANIFEST format version '",
                 std::string(words[1].substr(0, 20)), "' is not supported (this build reads ",
                 kFormatVersion, ")");
  }
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr)) {
    CHORUS_THROW(Error, "checkpoint: SHA-256 failed");
  }
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kDigits[md[i] >> 4]);
    out.push_back(kDigits[md[i] & 15]);
  }
  return out;
}

bool valid_file_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  if (name == "." || name == ".." || name == kManifestName) return false;
  for (char c : name) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::optional<uint64_t> parse_decimal(std::string_view text, uint64_t max) {
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    if (digit > max || value > (max - digit) / 10) return std::nullopt;  // value*10+digit > max
    value = value * 10 + digit;
  }
  return value;
}

std::string encode_manifest(const Manifest& manifest) {
  std::string body = std::string(kMagic) + " " + std::to_string(kFormatVersion) + "\n";
  body += "step " + std::to_string(manifest.step) + "\n";
  body += "files " + std::to_string(manifest.files.size()) + "\n";
  for (const FileEntry& f : manifest.files) {
    body += "file " + f.name + " " + std::to_string(f.size) + " sha256 " + f.sha256_hex + "\n";
  }
  return body + kChecksumKey + " " + sha256_hex(body) + "\n";
}

Manifest parse_manifest(std::string_view text, const std::string& where) {
  if (text.size() > kMaxManifestBytes)
    corrupt(where, "larger than " + std::to_string(kMaxManifestBytes) + " bytes");
  check_version(text, where);
  LineReader lines(verified_body(text, where), where);
  lines.expect(kMagic, 2);
  Manifest manifest;
  manifest.step = static_cast<int64_t>(
      number(lines.expect("step", 2)[1], std::numeric_limits<int64_t>::max(), "step", where));
  uint64_t count = number(lines.expect("files", 2)[1], kMaxFiles, "file count", where);
  for (uint64_t i = 0; i < count; ++i) {
    FileEntry entry = parse_file_line(lines, where);
    if (!manifest.files.empty() && entry.name <= manifest.files.back().name) {
      corrupt(where, "file '" + entry.name + "' is listed twice or out of order");
    }
    manifest.files.push_back(std::move(entry));
  }
  if (!lines.done())
    corrupt(where, "unexpected text after line " + std::to_string(lines.line_number()));
  return manifest;
}

}  // namespace chorus::ckpt
