// Rendezvous: a key-value store that the ranks of a job use to find each other, and the
// per-job secret that authenticates every connection (to the store and between peers).
//
// Values are arbitrary bytes. Keys are at most 4096 bytes, values at most 64 MiB, and one
// check() or wait() names at most 65536 keys (InvalidArgument beyond).
// Thread safety: a Store may be used by several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace chorus {

// The per-job secret. Never printed, never put on a command line.
class Secret {
 public:
  Secret() = default;
  explicit Secret(std::string bytes) : bytes_(std::move(bytes)) {}

  // 32 random bytes from the OS, hex-encoded (64 characters) so it fits CHORUS_SECRET.
  static Secret generate();
  // CHORUS_SECRET (the secret itself) or CHORUS_SECRET_FILE (a file readable by its owner
  // only: a file with group/other permissions is refused with InvalidArgument).
  static std::optional<Secret> from_env();
  // Reads a secret file, enforcing mode 0600 as above.
  static Secret from_file(const std::string& path);
  // Writes the secret to a new file with mode 0600.
  void write_file(const std::string& path) const;

  const std::string& bytes() const { return bytes_; }
  bool empty() const { return bytes_.empty(); }

 private:
  std::string bytes_;
};

class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value, replacing any previous value; wakes waiters.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until key exists and returns its value. TimeoutError names the key.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer stored at key (absent = 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Whether every key exists now (does not wait).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes key; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;
  // Waits until every key exists. TimeoutError names the missing keys.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// A view of another store that prepends `prefix` to every key (e.g. one per restart).
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store& base) : prefix_(std::move(prefix)), base_(base) {}
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;
  std::string prefix_;
  Store& base_;
};

struct TcpStoreServerOptions {
  int max_clients = 1024;                // further connections are refused
  uint32_t max_frame_bytes = 64u << 20;  // larger length prefixes drop the connection
  std::chrono::milliseconds handshake_timeout{5000};
};

// Serves a Store over TCP until destroyed. Every connection must pass the HMAC-SHA256
// challenge-response with `secret`; a connection that sends garbage, an oversized length
// or a wrong MAC is dropped and logged, and the server keeps serving everyone else.
class TcpStoreServer {
 public:
  // Binds host:port (port 0 picks a free port). Throws IoError when it cannot bind.
  TcpStoreServer(const std::string& host, uint16_t port, Secret secret,
                 TcpStoreServerOptions options = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const;
  // Number of connections dropped for failing authentication or sending bad frames.
  uint64_t rejected_connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A client of TcpStoreServer. Connects (retrying until `timeout`) and authenticates in the
// constructor: IoError/AuthError/TimeoutError on failure.
class TcpStoreClient : public Store {
 public:
  TcpStoreClient(const std::string& host, uint16_t port, Secret secret,
                 std::chrono::milliseconds timeout);
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A store on a directory shared by all ranks (e.g. NFS). Each key is a file written
// atomically (temporary file + rename); values carry an HMAC so a tampered or truncated
// file is rejected. The directory is created with mode 0700.
class FileStore : public Store {
 public:
  FileStore(const std::string& directory, Secret secret);
  ~FileStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool remove(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::string path_for(const std::string& key) const;
  std::string directory_;
  Secret secret_;
};

}  // namespace chorus
