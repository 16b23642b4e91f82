#include "client_conn.h"

#include "chorus/error.h"
#include "chorus/ps/cluster.h"
#include "rendezvous/auth.h"

namespace chorus::ps {
namespace {

constexpr int kSocketBufferBytes = 4 << 20;

std::string reply_message(const std::string& meta) {
  try {
    rendezvous::PayloadReader in(meta);
    return in.str();
  } catch (const Error&) {
    return "(no message)";
  }
}

}  // namespace

PsConnection::PsConnection(int index, std::string address, Secret secret,
                           std::chrono::milliseconds timeout)
    : index_(index), address_(std::move(address)), secret_(std::move(secret)), timeout_(timeout) {
  auto [host, port] =
      split_address(address_, ("parameter server " + std::to_string(index)).c_str());
  endpoint_ = net::Endpoint{host, port};
}

std::string PsConnection::name() const {
  return "parameter server " + std::to_string(index_) + " (" + address_ + ")";
}

void PsConnection::unavailable(const std::string& why) {
  fd_.reset();
  CHORUS_THROW(UnavailableError, name(), " is unavailable: ", why);
}

// Runs `io`; any failure to reach the ps becomes UnavailableError (AuthError stays one).
template <typename F>
void PsConnection::guarded(F&& io) {
  try {
    io();
  } catch (const AuthError& e) {
    fd_.reset();
    CHORUS_THROW(AuthError, name(), ": ", e.what());
  } catch (const UnavailableError&) {
    throw;
  } catch (const IoError& e) {
    unavailable(e.what());
  } catch (const TimeoutError& e) {
    unavailable(e.what());
  }
}

void PsConnection::connect(Deadline deadline) {
  if (fd_.valid()) return;
  guarded([&] {
    net::Fd fd = net::connect_tcp(endpoint_, deadline);  // retries while the ps starts
    net::set_buffer_sizes(fd.get(), kSocketBufferBytes);
    rendezvous::authenticate_client(fd.get(), secret_, wire::kPurpose, deadline);
    fd_ = std::move(fd);
  });
}

void PsConnection::send(wire::Type type, const std::string& meta,
                        const std::vector<wire::Piece>& bulk) {
  Deadline deadline = Deadline::after(timeout_);
  connect(deadline);
  sent_bulk_ = false;
  for (const wire::Piece& p : bulk) sent_bulk_ = sent_bulk_ || p.bytes > 0;
  guarded([&] { wire::send(fd_.get(), type, meta, bulk, deadline, "ps request"); });
}

std::string PsConnection::receive(uint64_t bulk_bytes, std::chrono::milliseconds extra) {
  if (!fd_.valid()) unavailable("not connected (an earlier request failed)");
  wire::Header header;
  std::string meta;
  guarded([&] {
    if (!wire::receive(fd_.get(), Deadline::after(timeout_ + extra), "ps reply", header, meta)) {
      CHORUS_THROW(IoError, "connection closed by the server");
    }
  });
  // Only a kOk reply carries data. Any other with bulk leaves unread bytes in the stream,
  // which the next reply would be read from: the connection is broken.
  if (header.type != wire::Type::kOk && header.bulk_bytes != 0) {
    unavailable("reply type " + std::to_string(static_cast<int>(header.type)) + " carries " +
                std::to_string(header.bulk_bytes) + " bytes of data (" + reply_message(meta) + ")");
  }
  switch (header.type) {
    case wire::Type::kOk:
      break;
    case wire::Type::kError:
      // A ps that refused a request before reading its bulk closes the connection after
      // this reply: start afresh on the next call rather than fail on a closed socket.
      if (sent_bulk_) fd_.reset();
      CHORUS_THROW(InvalidArgument, name(), ": ", reply_message(meta));
    case wire::Type::kTimeout:
      CHORUS_THROW(TimeoutError, name(), ": ", reply_message(meta));
    case wire::Type::kStopping:
      unavailable(reply_message(meta));
    default:
      unavailable("unexpected reply type " + std::to_string(static_cast<int>(header.type)));
  }
  if (bulk_bytes != header.bulk_bytes) {
    unavailable("reply carries " + std::to_string(header.bulk_bytes) + " bytes, the layout needs " +
                std::to_string(bulk_bytes));
  }
  return meta;
}

std::string PsConnection::receive_meta() { return receive(0); }

void PsConnection::recv_bulk(const std::vector<wire::Slot>& slots) {
  guarded([&] { wire::recv_bulk(fd_.get(), slots, Deadline::after(timeout_), "ps reply"); });
}

void PsConnection::shutdown_quietly(std::chrono::milliseconds limit) {
  try {
    Deadline deadline = Deadline::after(std::min(limit, timeout_));
    connect(deadline);
    wire::send(fd_.get(), wire::Type::kShutdown, {}, {}, deadline, "ps shutdown");
    wire::Header header;
    std::string meta;
    wire::receive(fd_.get(), deadline, "ps shutdown", header, meta);
  } catch (const Error&) {  // an unreachable ps is already gone
  }
  fd_.reset();
}

}  // namespace chorus::ps
