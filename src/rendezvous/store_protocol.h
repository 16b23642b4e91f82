// What TcpStoreClient and TcpStoreServer say to each other inside frames (frame.h), and the
// limits every Store shares. docs/wire_format.md lists the payload of each message.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "rendezvous/frame.h"

namespace chorus::rendezvous {

constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxValueBytes = 64u << 20;
// Most keys in one check() or wait(): the longest list a frame may carry (frame.h).
constexpr size_t kMaxKeys = kMaxListStrings;
// Room in a frame for everything but the value: the key and the length fields.
constexpr uint32_t kFrameOverheadBytes = kMaxKeyBytes + 64;
// Waits longer than this are clamped, so a deadline never overflows the clock.
constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(24 * 7);
// The purpose bound into the handshake MAC of store connections.
constexpr const char* kStorePurpose = "store";

enum class StoreOp : uint16_t {
  kSet = 1,     // key, value                 -> kOk
  kGet = 2,     // key, timeout_ms            -> kOk value | kTimeout [key]
  kAdd = 3,     // key, delta                 -> kOk new_value
  kCheck = 4,   // [keys]                     -> kOk u8
  kRemove = 5,  // key                        -> kOk u8
  kWait = 6,    // [keys], timeout_ms         -> kOk | kTimeout [missing keys]
  kOk = 100,
  kTimeout = 101,
  kError = 102,  // message: the request broke a rule (too long a key, add on a non-integer)
};

// Throws InvalidArgument when the key is empty or longer than kMaxKeyBytes.
void check_key(const std::string& key);
// Throws InvalidArgument when a key is bad or there are more than kMaxKeys of them.
void check_keys(const std::vector<std::string>& keys);
// A key as it should appear in a message: quoted, non-printable bytes escaped, long keys
// shortened, so a binary key cannot garble a log line.
std::string quote_key(const std::string& key);
// The first 16 keys, quoted, then "and N more".
std::string quote_keys(const std::vector<std::string>& keys);
// Parses the decimal integer stored by add(); InvalidArgument names the key otherwise.
int64_t parse_counter(const std::string& key, const std::string& value);
// Adds with an overflow check (InvalidArgument naming the key).
int64_t checked_add(const std::string& key, int64_t a, int64_t b);

}  // namespace chorus::rendezvous
