// Small wrappers over OpenSSL's libcrypto used by the handshake, the secret and FileStore.
// Kept here so no other file includes OpenSSL headers.
#pragma once

#include <cstddef>
#include <string>

namespace chorus::rendezvous {

constexpr size_t kMacBytes = 32;  // HMAC-SHA256 output

// n bytes from the OS's cryptographic random source. Throws Error if it fails.
std::string random_bytes(size_t n);
// HMAC-SHA256 of data keyed with key (kMacBytes bytes).
std::string hmac_sha256(const std::string& key, const std::string& data);
// SHA-256 of data (32 bytes).
std::string sha256(const std::string& data);
// Equality that takes the same time wherever the inputs differ, so an attacker cannot
// learn a MAC byte by byte from response times.
bool constant_time_equal(const std::string& a, const std::string& b);
// Lowercase hexadecimal.
std::string to_hex(const std::string& bytes);

}  // namespace chorus::rendezvous
