// PsClient's connection to one parameter server: connected on first use (retrying while
// the ps starts, up to the timeout) and kept. Every I/O failure — refused, closed, reset,
// timed out — becomes UnavailableError "parameter server <i> (<address>) is unavailable:
// ..." and closes the connection, as the stream may be out of step; a wrong secret is an
// AuthError naming the ps. Replies other than kOk become the error they stand for.
// Thread safety: none; PsClient uses each connection from one thread at a time.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "chorus/store.h"
#include "layout.h"
#include "util/net.h"
#include "wire.h"

namespace chorus::ps {

class PsConnection {
 public:
  PsConnection(int index, std::string address, Secret secret, std::chrono::milliseconds timeout);

  int index() const { return index_; }
  const std::string& address() const { return address_; }
  std::string name() const;  // "parameter server 1 (127.0.0.1:4711)"

  // Sends one request (connecting first if needed).
  void send(wire::Type type, const std::string& meta, const std::vector<wire::Piece>& bulk = {});
  // Reads a reply's header and meta, waiting up to the timeout plus `extra` (a pull's
  // server-side wait). Throws InvalidArgument (kError; the connection is closed when the
  // request carried bulk, as the ps may have dropped it), TimeoutError (kTimeout),
  // UnavailableError (kStopping, a reply other than kOk that carries bulk, or a kOk whose
  // bulk is not exactly `bulk_bytes`, which the caller knows from the layout).
  std::string receive(uint64_t bulk_bytes, std::chrono::milliseconds extra = {});
  // A reply without bulk.
  std::string receive_meta();
  void recv_bulk(const std::vector<wire::Slot>& slots);
  // Best effort: asks the ps to exit, waiting at most `limit`; errors are swallowed.
  void shutdown_quietly(std::chrono::milliseconds limit);

  // What this ps holds, once create() sent it or wait_for_variables() read it.
  bool has_part = false;
  PartLayout part;
  PsConfig config;

 private:
  void connect(Deadline deadline);
  [[noreturn]] void unavailable(const std::string& why);
  template <typename F>
  void guarded(F&& io);

  int index_;
  std::string address_;
  net::Endpoint endpoint_;
  Secret secret_;
  std::chrono::milliseconds timeout_;
  net::Fd fd_;
  bool sent_bulk_ = false;  // the last request carried bulk
};

}  // namespace chorus::ps
