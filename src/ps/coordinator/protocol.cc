#include "ps/coordinator/protocol.h"

#include "chorus/error.h"

namespace chorus::ps::coordinator {

using rendezvous::Frame;
using rendezvous::PayloadReader;
using rendezvous::PayloadWriter;

namespace {

void expect_type(const Frame& frame, Msg type) {
  if (frame.type != static_cast<uint16_t>(type)) {
    CHORUS_THROW(IoError, "coordinator protocol: expected message ", static_cast<int>(type),
                 ", got ", frame.type);
  }
}

// A string field with a cap of its own, checked before it is kept.
std::string capped_str(PayloadReader& in, size_t cap, const char* field) {
  std::string s = in.str();
  if (s.size() > cap) {
    CHORUS_THROW(IoError, "coordinator protocol: ", field, " of ", s.size(),
                 " bytes is over the limit of ", cap);
  }
  return s;
}

}  // namespace

std::string encode_hello(uint32_t worker_index) { return PayloadWriter().u32(worker_index).take(); }

uint32_t parse_hello(const Frame& frame) {
  expect_type(frame, Msg::kHello);
  PayloadReader in(frame.payload);
  uint32_t index = in.u32();
  in.finish();
  if (index > kMaxWorkerIndex) {
    CHORUS_THROW(IoError, "coordinator protocol: worker index ", index, " is over the limit");
  }
  return index;
}

std::string encode_welcome(std::chrono::milliseconds heartbeat_timeout) {
  return PayloadWriter().u32(static_cast<uint32_t>(heartbeat_timeout.count())).take();
}

std::chrono::milliseconds parse_welcome(const Frame& frame) {
  expect_type(frame, Msg::kWelcome);
  PayloadReader in(frame.payload);
  uint32_t ms = in.u32();
  in.finish();
  if (ms == 0) CHORUS_THROW(IoError, "coordinator protocol: heartbeat timeout of 0 ms");
  return std::chrono::milliseconds(ms);
}

std::string encode_step(const StepMsg& step) {
  return PayloadWriter().i64(step.id).str(step.function).str(step.argument).take();
}

StepMsg parse_step(const Frame& frame) {
  expect_type(frame, Msg::kStep);
  PayloadReader in(frame.payload);
  StepMsg step;
  step.id = in.i64();
  step.function = capped_str(in, kMaxFunctionBytes, "function name");
  step.argument = capped_str(in, kMaxArgumentBytes, "argument");
  in.finish();
  if (step.function.empty()) CHORUS_THROW(IoError, "coordinator protocol: empty function name");
  return step;
}

std::string encode_reply(const ReplyMsg& reply) {
  PayloadWriter out;
  out.i64(reply.id);
  if (reply.ok) return out.str(reply.result).take();
  return out.str(reply.kind).str(reply.message).take();
}

ReplyMsg parse_reply(const Frame& frame) {
  ReplyMsg reply;
  reply.ok = frame.type == static_cast<uint16_t>(Msg::kResult);
  if (!reply.ok) expect_type(frame, Msg::kError);
  PayloadReader in(frame.payload);
  reply.id = in.i64();
  if (reply.ok) {
    reply.result = capped_str(in, kMaxArgumentBytes, "result");
  } else {
    reply.kind = capped_str(in, kMaxKindBytes, "error kind");
    reply.message = capped_str(in, kMaxMessageBytes, "error message");
  }
  in.finish();
  return reply;
}

std::string encode_text(const std::string& text) {
  return PayloadWriter().str(text.substr(0, kMaxMessageBytes)).take();
}

std::string parse_text(const Frame& frame) {
  PayloadReader in(frame.payload);
  std::string text = capped_str(in, kMaxMessageBytes, "message");
  in.finish();
  return text;
}

void check_empty(const Frame& frame) {
  if (!frame.payload.empty()) {
    CHORUS_THROW(IoError, "coordinator protocol: message ", frame.type, " carries ",
                 frame.payload.size(), " unexpected bytes");
  }
}

void send(int fd, Msg type, const std::string& payload, Deadline deadline, const char* what) {
  rendezvous::write_frame(fd, static_cast<uint16_t>(type), payload, deadline, what);
}

bool receive(int fd, Deadline deadline, const char* what, Frame& out) {
  return rendezvous::read_frame(fd, kMaxFrameBytes, deadline, what, out);
}

}  // namespace chorus::ps::coordinator
