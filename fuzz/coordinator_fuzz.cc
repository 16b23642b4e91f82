// Coordinator frames, both directions: every frame of the stream is parsed as the message
// its type says (the coordinator parses hello, result, error, pong; a worker parses
// welcome, reject, step, shutdown, ping), with the coordinator's frame limit.
#include "fuzz_support.h"
#include "ps/coordinator/protocol.h"

namespace chorus::fuzz {
namespace {

namespace proto = ps::coordinator;

void parse(const rendezvous::Frame& frame) {
  switch (static_cast<proto::Msg>(frame.type)) {
    case proto::Msg::kHello:
      proto::parse_hello(frame);
      break;
    case proto::Msg::kWelcome:
      proto::parse_welcome(frame);
      break;
    case proto::Msg::kReject:
      proto::parse_text(frame);
      break;
    case proto::Msg::kStep:
      proto::parse_step(frame);
      break;
    case proto::Msg::kResult:
    case proto::Msg::kError:
      proto::parse_reply(frame);
      break;
    default:
      proto::check_empty(frame);
  }
}

}  // namespace
}  // namespace chorus::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  fuzz::FedSocket socket(data, size);
  fuzz::expect_chorus_errors([&] {
    rendezvous::Frame frame;
    while (ps::coordinator::receive(socket.fd(), fuzz::io_deadline(), "fuzz", frame)) {
      fuzz::expect_chorus_errors([&] { fuzz::parse(frame); });
    }
  });
  return 0;
}
