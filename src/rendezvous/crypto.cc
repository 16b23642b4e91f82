#include "rendezvous/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "chorus/error.h"

namespace chorus::rendezvous {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    CHORUS_THROW(Error, "RAND_bytes failed: the OS random source is unavailable");
  }
  return out;
}

std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len)) {
    CHORUS_THROW(Error, "HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<char*>(mac), len);
}

std::string sha256(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr)) {
    CHORUS_THROW(Error, "SHA-256 failed");
  }
  return std::string(reinterpret_cast<char*>(md), len);
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;  // sizes are public (always kMacBytes here)
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string to_hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

}  // namespace chorus::rendezvous
