// A parameter server's side of one authenticated connection: every request a client could
// send (header, message fields, bulk floats), answered by the real request handler on a
// fresh PsState, until the stream ends or the handler drops the connection. Announced sizes
// must never be allocated ahead of the bytes (libFuzzer's -rss_limit_mb catches that), and
// a hostile layout, config, state file or learning rate must be an error, not a crash.
#include <cstdlib>

#include "fuzz_support.h"
#include "ps/ps_state.h"
#include "ps/server_requests.h"
#include "ps/wire.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The handler's reply deadline; replies are drained at once, so 2 s is ample.
  ::setenv("CHORUS_TIMEOUT_SECONDS", "2", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  fuzz::FedSocket socket(data, size);
  ps::PsState state;
  ps::Connection conn;
  conn.fd.reset(::dup(socket.fd()));
  ps::RequestContext ctx{state, conn, [] {}};
  fuzz::expect_chorus_errors([&] {
    ps::wire::Header header;
    std::string meta;
    while (ps::wire::receive(conn.fd.get(), fuzz::io_deadline(), "fuzz", header, meta)) {
      if (!ps::handle_request(ctx, header, meta)) break;
    }
  });
  state.stop();
  return 0;
}
