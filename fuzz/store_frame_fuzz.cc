// Store frames as a client reads the server's replies: any number of frames from a stream
// (read_frame checks magic, version and length; the payload grows as bytes arrive), each
// payload parsed in every shape a reply to a store operation can take. The server's side of
// the same frames is store_server_fuzz.
#include "fuzz_support.h"
#include "rendezvous/frame.h"
#include "rendezvous/store_protocol.h"

namespace chorus::fuzz {
namespace {

using rendezvous::Frame;
using rendezvous::PayloadReader;

// The reply shapes of docs/wire_format.md: kOk value | u8 | i64 | empty, kTimeout [keys],
// kError message.
void parse_every_shape(const Frame& frame) {
  expect_chorus_errors([&] {
    PayloadReader in(frame.payload);
    in.str();
    in.finish();
  });
  expect_chorus_errors([&] {
    PayloadReader in(frame.payload);
    in.u8();
    in.finish();
  });
  expect_chorus_errors([&] {
    PayloadReader in(frame.payload);
    rendezvous::parse_counter("fuzz", std::to_string(in.i64()));
    in.finish();
  });
  expect_chorus_errors([&] {
    PayloadReader in(frame.payload);
    rendezvous::check_keys(in.strs());
    in.i64();
    in.f64();
    in.finish();
  });
  rendezvous::quote_key(frame.payload);
}

}  // namespace
}  // namespace chorus::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  fuzz::FedSocket socket(data, size);
  fuzz::expect_chorus_errors([&] {
    rendezvous::Frame frame;
    // A small bound as well as the store's, so both branches of the length check run.
    uint32_t max = size > 0 && (data[0] & 1) ? 64 : rendezvous::kMaxValueBytes;
    while (rendezvous::read_frame(socket.fd(), max, fuzz::io_deadline(), "fuzz", frame)) {
      fuzz::parse_every_shape(frame);
    }
  });
  return 0;
}
