// FileStore: one file per key in a shared directory. File names are the SHA-256 of the key
// (keys are arbitrary bytes up to 4096, longer than a file name may be). Each file holds
//   magic "CHFS" u32 | version u16 | 0 u16 | key length u32 | value length u64 | key | value
//   | HMAC-SHA256(secret, "chorus-file-v1\0" + everything before it)
// The MAC covers the key, so a file copied under another key's name is rejected too.
// Writers write a private temporary file and rename() it into place, so readers see the old
// or the new value, never half of one. add() holds flock() on a lock file in the directory,
// which serialises read-modify-write across threads and processes alike (each call opens
// its own descriptor, and flock locks belong to the open file description).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "chorus/error.h"
#include "chorus/store.h"
#include "rendezvous/crypto.h"
#include "rendezvous/frame.h"
#include "rendezvous/store_protocol.h"
#include "util/env.h"
#include "util/net.h"

namespace chorus {

using rendezvous::quote_key;

namespace {

constexpr uint32_t kFileMagic = 0x53464843;  // bytes "CHFS" read as little-endian
constexpr uint16_t kFileVersion = 1;
constexpr size_t kFileHeaderBytes = 20;
constexpr size_t kMaxFileBytes = kFileHeaderBytes + rendezvous::kMaxKeyBytes +
                                 rendezvous::kMaxValueBytes + rendezvous::kMacBytes;
constexpr auto kMaxPollSleep = std::chrono::milliseconds(50);

std::string mac_of(const Secret& secret, const std::string& body) {
  return rendezvous::hmac_sha256(secret.bytes(), std::string("chorus-file-v1", 15) + body);
}

std::string encode_file(const Secret& secret, const std::string& key, const std::string& value) {
  rendezvous::PayloadWriter w;
  w.u32(kFileMagic).u32(kFileVersion).u32(static_cast<uint32_t>(key.size()));
  w.u32(static_cast<uint32_t>(value.size())).u32(0);  // value length as two u32 (u64 LE)
  std::string body = w.take() + key + value;
  return body + mac_of(secret, body);
}

// The value stored in `bytes`, or AuthError when the file is not one we wrote for `key`.
std::string decode_file(const Secret& secret, const std::string& key, const std::string& path,
                        const std::string& bytes) {
  auto fail = [&](const char* why) {
    CHORUS_THROW(AuthError, "FileStore: file '", path, "' for key ", quote_key(key),
                 " failed its integrity check (", why,
                 "): it was tampered with, truncated, or written with another secret");
  };
  if (bytes.size() < kFileHeaderBytes + rendezvous::kMacBytes) fail("too short");
  const size_t body_size = bytes.size() - rendezvous::kMacBytes;
  const std::string body = bytes.substr(0, body_size);
  if (!rendezvous::constant_time_equal(bytes.substr(body_size), mac_of(secret, body))) {
    fail("wrong MAC");
  }
  rendezvous::PayloadReader r(body);
  if (r.u32() != kFileMagic || r.u32() != kFileVersion) fail("bad magic or version");
  uint32_t key_size = r.u32();
  uint64_t value_size = r.u32() | (static_cast<uint64_t>(r.u32()) << 32);
  // Compared by subtraction: value_size is 64-bit, so a sum could wrap and pass, and then
  // substr() below would throw std::out_of_range instead of this AuthError.
  const size_t room = body_size - kFileHeaderBytes;  // the size check above keeps it >= 0
  if (key_size > room || value_size != room - key_size) fail("bad lengths");
  if (body.compare(kFileHeaderBytes, key_size, key) != 0) fail("written for another key");
  return body.substr(kFileHeaderBytes + key_size);
}

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      CHORUS_THROW(IoError, "FileStore: cannot write '", path, "': ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

// The file's bytes, or nullopt when it does not exist.
std::optional<std::string> read_file(const std::string& path) {
  net::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::nullopt;
    CHORUS_THROW(IoError, "FileStore: cannot open '", path, "': ", std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    CHORUS_THROW(AuthError, "FileStore: '", path, "' is not a regular file of at most ",
                 kMaxFileBytes, " bytes");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) CHORUS_THROW(IoError, "FileStore: cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) break;  // shrank under us: the MAC check reports it
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

// Sleeps a little longer each time (1 ms up to kMaxPollSleep), never past the deadline.
void poll_sleep(std::chrono::milliseconds& pause, Deadline deadline) {
  auto left = std::chrono::milliseconds(deadline.remaining_ms());
  std::this_thread::sleep_for(std::min(pause, left));
  pause = std::min(pause * 2, kMaxPollSleep);
}

// Holds an exclusive flock() on a lock file until destroyed.
class FileLock {
 public:
  FileLock(const std::string& path, Deadline deadline)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) {
    if (!fd_.valid()) {
      CHORUS_THROW(IoError, "FileStore: cannot open lock '", path, "': ", std::strerror(errno));
    }
    auto pause = std::chrono::milliseconds(1);
    while (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        CHORUS_THROW(IoError, "FileStore: flock '", path, "' failed: ", std::strerror(errno));
      }
      if (deadline.expired()) {
        CHORUS_THROW(TimeoutError, "FileStore: timed out waiting for the lock '", path, "'");
      }
      poll_sleep(pause, deadline);
    }
  }
  ~FileLock() { ::flock(fd_.get(), LOCK_UN); }

 private:
  net::Fd fd_;
};

std::optional<std::string> load(const std::string& path, const Secret& secret,
                                const std::string& key) {
  auto bytes = read_file(path);
  if (!bytes) return std::nullopt;
  return decode_file(secret, key, path, *bytes);
}

}  // namespace

FileStore::FileStore(const std::string& directory, Secret secret)
    : directory_(directory), secret_(std::move(secret)) {
  CHORUS_CHECK_ARG(!directory_.empty(), "FileStore needs a directory");
  CHORUS_CHECK_ARG(!secret_.empty(), "FileStore needs a job secret");
  std::filesystem::path dir(directory_);
  std::error_code ec;
  if (dir.has_parent_path()) std::filesystem::create_directories(dir.parent_path(), ec);
  if (::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST) {
    CHORUS_THROW(IoError, "FileStore: cannot create '", directory_, "': ", std::strerror(errno));
  }
  struct stat st {};
  if (::stat(directory_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    CHORUS_THROW(IoError, "FileStore: '", directory_, "' is not a directory");
  }
}

FileStore::~FileStore() = default;

std::string FileStore::path_for(const std::string& key) const {
  return directory_ + "/k-" + rendezvous::to_hex(rendezvous::sha256(key));
}

void FileStore::set(const std::string& key, const std::string& value) {
  rendezvous::check_key(key);
  CHORUS_CHECK_ARG(value.size() <= rendezvous::kMaxValueBytes, "value for key ", quote_key(key),
                   " is ", value.size(), " bytes; the limit is ", rendezvous::kMaxValueBytes);
  const std::string path = path_for(key);
  const std::string tmp = directory_ + "/.tmp-" + rendezvous::to_hex(rendezvous::random_bytes(8));
  {
    net::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd.valid()) {
      CHORUS_THROW(IoError, "FileStore: cannot create '", tmp, "': ", std::strerror(errno));
    }
    // No fsync: rendezvous data need not survive a machine crash, and a torn file after
    // one is caught by the MAC.
    write_all(fd.get(), encode_file(secret_, key, value), tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    CHORUS_THROW(IoError, "FileStore: cannot rename '", tmp, "' to '", path,
                 "': ", std::strerror(err));
  }
}

std::string FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  rendezvous::check_key(key);
  timeout = std::clamp(timeout, std::chrono::milliseconds(0), rendezvous::kMaxWait);
  Deadline deadline = Deadline::after(timeout);
  const std::string path = path_for(key);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (auto value = load(path, secret_, key)) return *value;
    if (deadline.expired()) {
      CHORUS_THROW(TimeoutError, "FileStore: get(", quote_key(key), ") timed out after ",
                   timeout.count(), " ms; missing keys: ", quote_key(key));
    }
    poll_sleep(pause, deadline);
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  rendezvous::check_key(key);
  FileLock lock(directory_ + "/.add.lock", Deadline::after(default_timeout()));
  auto old = load(path_for(key), secret_, key);
  int64_t value =
      rendezvous::checked_add(key, old ? rendezvous::parse_counter(key, *old) : 0, delta);
  set(key, std::to_string(value));
  return value;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  rendezvous::check_keys(keys);
  for (const auto& key : keys) {
    if (::access(path_for(key).c_str(), F_OK) != 0) return false;
  }
  return true;
}

bool FileStore::remove(const std::string& key) {
  rendezvous::check_key(key);
  if (::unlink(path_for(key).c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  CHORUS_THROW(IoError, "FileStore: cannot remove key ", quote_key(key), ": ",
               std::strerror(errno));
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  rendezvous::check_keys(keys);
  timeout = std::clamp(timeout, std::chrono::milliseconds(0), rendezvous::kMaxWait);
  Deadline deadline = Deadline::after(timeout);
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (::access(path_for(key).c_str(), F_OK) != 0) missing.push_back(key);
    }
    if (missing.empty()) return;
    if (deadline.expired()) {
      CHORUS_THROW(TimeoutError, "FileStore: wait(", rendezvous::quote_keys(keys),
                   ") timed out after ", timeout.count(),
                   " ms; missing keys: ", rendezvous::quote_keys(missing));
    }
    poll_sleep(pause, deadline);
  }
}

}  // namespace chorus
