#include "server_requests.h"

#include <poll.h>

#include <algorithm>
#include <cmath>

#include "chorus/error.h"
#include "util/env.h"
#include "util/log.h"

namespace chorus::ps {
namespace {

using rendezvous::PayloadReader;
using rendezvous::PayloadWriter;
using wire::Type;

constexpr int64_t kMaxWaitMs = int64_t{7} * 24 * 3600 * 1000;

// A client that hung up (or reset) while its pull waits in the server.
bool peer_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

struct Reply {
  Type type = Type::kOk;
  std::string meta;
  std::vector<wire::Piece> bulk;
};

class Handler {
 public:
  Handler(RequestContext& ctx, const wire::Header& h) : ctx_(ctx), header_(h) {}
  Reply dispatch(const std::string& meta);
  // Whether the request's bulk bytes have left the socket (the stream is in step).
  bool in_step() const { return header_.bulk_bytes == 0 || received_; }

 private:
  Reply create(PayloadReader& in);
  Reply layout(PayloadReader& in);
  Reply pull(PayloadReader& in);
  Reply push(PayloadReader& in);
  Reply stats(PayloadReader& in);
  Reply save(PayloadReader& in);
  Reply restore(PayloadReader& in);
  Reply shutdown(PayloadReader& in);

  // IoError unless the request carries exactly `want` bytes of bulk: checked before the
  // destination is allocated.
  void expect_bulk(uint64_t want) const;
  void receive_bulk(const std::vector<wire::Slot>& slots);
  // n floats of the bulk (already checked by expect_bulk), memory growing as they arrive.
  void receive_floats(std::vector<float>& out, size_t n) {
    wire::recv_floats_growing(ctx_.conn.fd.get(), out, n, io_deadline(), "ps request");
  }
  Deadline io_deadline() const { return Deadline::after(default_timeout()); }

  RequestContext& ctx_;
  const wire::Header& header_;
  bool received_ = false;
  std::string saved_;  // kSave's reply body
};

void Handler::expect_bulk(uint64_t want) const {
  if (header_.bulk_bytes != want) {
    CHORUS_THROW(IoError, "request type ", static_cast<int>(header_.type), " carries ",
                 header_.bulk_bytes, " bytes of data, this ps's layout needs ", want);
  }
}

void Handler::receive_bulk(const std::vector<wire::Slot>& slots) {
  uint64_t want = 0;
  for (const auto& s : slots) want += s.bytes;
  expect_bulk(want);
  wire::recv_bulk(ctx_.conn.fd.get(), slots, io_deadline(), "ps request");
  received_ = true;
}

Reply Handler::dispatch(const std::string& meta) {
  PayloadReader in(meta);
  switch (header_.type) {
    case Type::kCreate:
      return create(in);
    case Type::kLayout:
      return layout(in);
    case Type::kPull:
      return pull(in);
    case Type::kPush:
      return push(in);
    case Type::kStats:
      return stats(in);
    case Type::kSave:
      return save(in);
    case Type::kRestore:
      return restore(in);
    case Type::kShutdown:
      return shutdown(in);
    default:
      CHORUS_THROW(IoError, "unknown ps request type ", static_cast<int>(header_.type));
  }
}

Reply Handler::create(PayloadReader& in) {
  PartLayout part = get_part(in);
  PsConfig config = get_config(in);
  in.finish();
  expect_bulk(static_cast<uint64_t>(checked_elements(part)) * sizeof(float));
  auto model = PsState::new_model(std::move(part), config);
  for (size_t i = 0; i < model->shards.size(); ++i) {
    const auto n = static_cast<size_t>(model->part.shards[i].length);
    receive_floats(model->shards[i]->values, n);
  }
  received_ = true;
  PsState::size_slots(*model);  // only once every value is here
  CHORUS_LOG(kInfo, "ps") << "created " << model->part.variables.size() << " variables, "
                          << model->elements << " elements here, for " << ctx_.conn.peer;
  ctx_.state.install(std::move(model));
  return {};
}

Reply Handler::layout(PayloadReader& in) {
  in.finish();
  receive_bulk({});
  PartLayout part;
  PsConfig config;
  PayloadWriter out;
  if (!ctx_.state.layout(part, config)) return {Type::kOk, out.u8(0).take(), {}};
  out.u8(1);
  put_part(out, part);
  put_config(out, config);
  return {Type::kOk, out.take(), {}};
}

Reply Handler::pull(PayloadReader& in) {
  int64_t min_version = in.i64();
  int64_t wait_ms = std::clamp<int64_t>(in.i64(), 0, kMaxWaitMs);
  in.finish();
  receive_bulk({});
  int fd = ctx_.conn.fd.get();
  auto result =
      ctx_.state.wait_version(min_version, Deadline::after(std::chrono::milliseconds(wait_ms)),
                              [fd] { return peer_gone(fd); });
  if (result == PsState::WaitResult::kPeerGone) CHORUS_THROW(IoError, "client left during a pull");
  if (result == PsState::WaitResult::kStopped) {
    return {
        Type::kStopping, PayloadWriter().str("the parameter server is shutting down").take(), {}};
  }
  if (result == PsState::WaitResult::kTimeout) {
    return {Type::kTimeout,
            PayloadWriter()
                .str("version " + std::to_string(min_version) + " was not reached within " +
                     std::to_string(wait_ms) + " ms (ps at version " +
                     std::to_string(ctx_.state.stats().version) + ")")
                .take(),
            {}};
  }
  int64_t generation = 0;
  ctx_.state.elements(generation);
  auto& values = ctx_.conn.scratch;
  int64_t version = ctx_.state.read_values(generation, values);
  return {Type::kOk,
          PayloadWriter().i64(version).take(),
          {{values.data(), values.size() * sizeof(float)}}};
}

Reply Handler::push(PayloadReader& in) {
  int64_t tag = in.i64();
  double lr = in.f64();
  in.finish();
  int64_t generation = 0;
  auto n = static_cast<size_t>(ctx_.state.elements(generation));
  expect_bulk(n * sizeof(float));
  auto& grads = ctx_.conn.scratch;
  receive_floats(grads, n);
  received_ = true;
  CHORUS_CHECK_ARG(std::isfinite(lr), "push: learning rate ", lr, " is not finite");
  auto result = ctx_.state.push(generation, tag, lr, grads.data());
  return {Type::kOk, PayloadWriter().u8(result.applied ? 1 : 0).i64(result.version).take(), {}};
}

Reply Handler::stats(PayloadReader& in) {
  in.finish();
  receive_bulk({});
  PsStats s = ctx_.state.stats();
  return {Type::kOk,
          PayloadWriter()
              .i64(s.version)
              .i64(s.pushes_applied)
              .i64(s.pushes_dropped)
              .i64(s.elements)
              .take(),
          {}};
}

Reply Handler::save(PayloadReader& in) {
  in.finish();
  receive_bulk({});
  saved_ = ctx_.state.save();
  return {Type::kOk, {}, {{saved_.data(), saved_.size()}}};
}

Reply Handler::restore(PayloadReader& in) {
  in.finish();
  uint64_t want = ctx_.state.state_file_bytes();  // InvalidArgument before create
  expect_bulk(want);
  std::string file;  // grows with the bytes received, like a create's values
  net::recv_growing(ctx_.conn.fd.get(), file, static_cast<size_t>(want), io_deadline(),
                    "ps request");
  received_ = true;
  ctx_.state.restore(file);
  return {};
}

Reply Handler::shutdown(PayloadReader& in) {
  in.finish();
  receive_bulk({});
  ctx_.on_shutdown();
  return {};
}

}  // namespace

bool handle_request(RequestContext& ctx, const wire::Header& header, const std::string& meta) {
  Handler handler(ctx, header);
  Reply reply;
  bool keep = true;
  try {
    reply = handler.dispatch(meta);
  } catch (const InvalidArgument& e) {  // the request broke a rule; answer, then go on if we can
    reply = Reply{Type::kError, PayloadWriter().str(e.what()).take(), {}};
    keep = handler.in_step();
  }
  wire::send(ctx.conn.fd.get(), reply.type, reply.meta, reply.bulk,
             Deadline::after(default_timeout()), "ps reply");
  return keep;
}

}  // namespace chorus::ps
