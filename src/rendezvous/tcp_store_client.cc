// TcpStoreClient: one authenticated connection, one request in flight at a time (callers
// take turns through a lock whose wait is bounded by the call's deadline). Requests that wait
// (get, wait) send their timeout to the server, which answers kTimeout when it passes; the
// client waits a grace period longer for that answer. If the answer still does not come,
// or any I/O fails, the stream may be out of step, so the connection is closed and every
// later call fails fast with IoError instead of reading someone else's reply.
#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "chorus/error.h"
#include "chorus/store.h"
#include "rendezvous/auth.h"
#include "rendezvous/frame.h"
#include "rendezvous/store_protocol.h"
#include "util/net.h"

namespace chorus {

using rendezvous::Frame;
using rendezvous::PayloadReader;
using rendezvous::PayloadWriter;
using rendezvous::StoreOp;

struct TcpStoreClient::Impl {
  Frame call(StoreOp op, const std::string& payload, Deadline deadline, const std::string& what);
  Frame exchange(StoreOp op, const std::string& payload, Deadline deadline,
                 const std::string& what);
  std::chrono::milliseconds clamp(std::chrono::milliseconds timeout) const {
    return std::clamp(timeout, std::chrono::milliseconds(0), rendezvous::kMaxWait);
  }
  Deadline op_deadline() const { return Deadline::after(op_timeout); }

  // A lock whose wait is bounded by the call's deadline. Built from a mutex and a condition
  // variable rather than std::timed_mutex, whose clocklock ThreadSanitizer cannot see.
  bool acquire(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu);
    if (!released.wait_until(lock, deadline.at(), [this] { return !busy; })) return false;
    busy = true;
    return true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      busy = false;
    }
    released.notify_one();
  }

  std::mutex mu;
  std::condition_variable released;
  bool busy = false;   // guarded by mu: a call owns the connection
  net::Fd fd;          // owned by the call that set busy
  std::string broken;  // owned like fd: why the connection was closed, empty while usable
  std::string server;
  std::chrono::milliseconds op_timeout{0};
};

Frame TcpStoreClient::Impl::call(StoreOp op, const std::string& payload, Deadline deadline,
                                 const std::string& what) {
  if (!acquire(deadline)) {
    CHORUS_THROW(TimeoutError, what, ": timed out waiting for another thread's call on the ",
                 "store client to finish");
  }
  struct Releaser {
    Impl* impl;
    ~Releaser() { impl->release(); }
  } releaser{this};
  if (!broken.empty()) {
    CHORUS_THROW(IoError, what, ": the connection to the store at ", server,
                 " was closed after an earlier error: ", broken);
  }
  try {
    return exchange(op, payload, deadline, what);
  } catch (const std::exception& e) {  // chorus errors, and std::bad_alloc mid-reply alike
    broken = e.what();
    fd.reset();
    throw;
  }
}

Frame TcpStoreClient::Impl::exchange(StoreOp op, const std::string& payload, Deadline deadline,
                                     const std::string& what) {
  rendezvous::write_frame(fd.get(), static_cast<uint16_t>(op), payload, deadline, what.c_str());
  Frame reply;
  const uint32_t max_reply = rendezvous::kMaxValueBytes + rendezvous::kFrameOverheadBytes;
  if (!rendezvous::read_frame(fd.get(), max_reply, deadline, what.c_str(), reply)) {
    CHORUS_THROW(IoError, what, ": the store at ", server, " closed the connection");
  }
  auto status = static_cast<StoreOp>(reply.type);
  if (status != StoreOp::kOk && status != StoreOp::kTimeout && status != StoreOp::kError) {
    CHORUS_THROW(IoError, what, ": unexpected reply type ", reply.type, " from ", server);
  }
  return reply;
}

namespace {

// Turns kError / kTimeout replies into exceptions. Every reply is parsed to its last byte
// (PayloadReader::finish): trailing bytes mean a server out of step or not ours (IoError).
void throw_unless_ok(const Frame& reply, const std::string& what,
                     std::chrono::milliseconds timeout) {
  if (reply.type == static_cast<uint16_t>(StoreOp::kError)) {
    PayloadReader in(reply.payload);
    std::string message = in.str();
    in.finish();
    CHORUS_THROW(InvalidArgument, what, " refused by the store: ", message);
  }
  if (reply.type == static_cast<uint16_t>(StoreOp::kTimeout)) {
    PayloadReader in(reply.payload);
    auto missing = in.strs();
    in.finish();
    CHORUS_THROW(TimeoutError, what, " timed out after ", timeout.count(),
                 " ms; missing keys: ", rendezvous::quote_keys(missing));
  }
}

// For replies whose kOk payload is empty (set, wait).
void expect_empty_ok(const Frame& reply, const std::string& what,
                     std::chrono::milliseconds timeout) {
  throw_unless_ok(reply, what, timeout);
  PayloadReader(reply.payload).finish();
}

// Time the server gets to answer after a waiting request's own timeout has passed.
constexpr std::chrono::milliseconds kReplyGrace{2000};

}  // namespace

TcpStoreClient::TcpStoreClient(const std::string& host, uint16_t port, Secret secret,
                               std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  CHORUS_CHECK_ARG(!secret.empty(), "TcpStoreClient needs a job secret");
  net::Endpoint endpoint{host, port};
  impl_->server = endpoint.to_string();
  impl_->op_timeout = impl_->clamp(timeout);
  Deadline deadline = Deadline::after(impl_->op_timeout);
  impl_->fd = net::connect_tcp(endpoint, deadline);
  rendezvous::authenticate_client(impl_->fd.get(), secret, rendezvous::kStorePurpose, deadline);
}

TcpStoreClient::~TcpStoreClient() = default;

void TcpStoreClient::set(const std::string& key, const std::string& value) {
  rendezvous::check_key(key);
  CHORUS_CHECK_ARG(value.size() <= rendezvous::kMaxValueBytes, "value for key ",
                   rendezvous::quote_key(key), " is ", value.size(), " bytes; the limit is ",
                   rendezvous::kMaxValueBytes);
  std::string what = "set(" + rendezvous::quote_key(key) + ")";
  auto payload = PayloadWriter().str(key).str(value).take();
  expect_empty_ok(impl_->call(StoreOp::kSet, payload, impl_->op_deadline(), what), what, {});
}

std::string TcpStoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  rendezvous::check_key(key);
  timeout = impl_->clamp(timeout);
  std::string what = "get(" + rendezvous::quote_key(key) + ")";
  auto payload = PayloadWriter().str(key).i64(timeout.count()).take();
  Frame reply = impl_->call(StoreOp::kGet, payload, Deadline::after(timeout + kReplyGrace), what);
  throw_unless_ok(reply, what, timeout);
  PayloadReader in(reply.payload);
  std::string value = in.str();
  in.finish();
  return value;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  rendezvous::check_key(key);
  std::string what = "add(" + rendezvous::quote_key(key) + ")";
  auto payload = PayloadWriter().str(key).i64(delta).take();
  Frame reply = impl_->call(StoreOp::kAdd, payload, impl_->op_deadline(), what);
  throw_unless_ok(reply, what, {});
  PayloadReader in(reply.payload);
  int64_t value = in.i64();
  in.finish();
  return value;
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  rendezvous::check_keys(keys);
  std::string what = "check(" + rendezvous::quote_keys(keys) + ")";
  Frame reply =
      impl_->call(StoreOp::kCheck, PayloadWriter().strs(keys).take(), impl_->op_deadline(), what);
  throw_unless_ok(reply, what, {});
  PayloadReader in(reply.payload);
  bool all = in.u8() != 0;
  in.finish();
  return all;
}

bool TcpStoreClient::remove(const std::string& key) {
  rendezvous::check_key(key);
  std::string what = "remove(" + rendezvous::quote_key(key) + ")";
  Frame reply =
      impl_->call(StoreOp::kRemove, PayloadWriter().str(key).take(), impl_->op_deadline(), what);
  throw_unless_ok(reply, what, {});
  PayloadReader in(reply.payload);
  bool existed = in.u8() != 0;
  in.finish();
  return existed;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  rendezvous::check_keys(keys);
  timeout = impl_->clamp(timeout);
  std::string what = "wait(" + rendezvous::quote_keys(keys) + ")";
  auto payload = PayloadWriter().strs(keys).i64(timeout.count()).take();
  Frame reply = impl_->call(StoreOp::kWait, payload, Deadline::after(timeout + kReplyGrace), what);
  expect_empty_ok(reply, what, timeout);
}

}  // namespace chorus
