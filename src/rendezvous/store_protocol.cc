#include "rendezvous/store_protocol.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "chorus/error.h"

namespace chorus::rendezvous {

void check_key(const std::string& key) {
  CHORUS_CHECK_ARG(!key.empty(), "store keys must not be empty");
  CHORUS_CHECK_ARG(key.size() <= kMaxKeyBytes, "store key ", quote_key(key), " is ", key.size(),
                   " bytes; the limit is ", kMaxKeyBytes);
}

void check_keys(const std::vector<std::string>& keys) {
  CHORUS_CHECK_ARG(keys.size() <= kMaxKeys, "a store key list holds at most ", kMaxKeys,
                   " keys; got ", keys.size());
  for (const auto& k : keys) check_key(k);
}

std::string quote_key(const std::string& key) {
  constexpr size_t kShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kShown; ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (key.size() > kShown) out += "...";
  return out + "'";
}

std::string quote_keys(const std::vector<std::string>& keys) {
  // A list may hold kMaxKeys keys: naming them all would make a megabytes-long message.
  constexpr size_t kShown = 16;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) out += ", ";
    out += quote_key(keys[i]);
  }
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

int64_t parse_counter(const std::string& key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  long long v = value.empty() ? 0 : std::strtoll(value.c_str(), &end, 10);
  CHORUS_CHECK_ARG(!value.empty() && errno == 0 && end == value.c_str() + value.size(),
                   "add() on key ", quote_key(key), " whose value is not an integer");
  return v;
}

int64_t checked_add(const std::string& key, int64_t a, int64_t b) {
  int64_t out = 0;
  CHORUS_CHECK_ARG(!__builtin_add_overflow(a, b, &out), "add() on key ", quote_key(key),
                   " overflows int64");
  return out;
}

}  // namespace chorus::rendezvous
