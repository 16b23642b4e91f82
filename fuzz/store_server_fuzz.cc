// The store server's side of an authenticated connection: a client that passed the
// handshake and then sends these bytes (frames of set, get, add, check, remove, wait with
// any payload). A fresh server per input (so no input sees another's keys); the server must
// answer or drop the connection, never crash, and keep serving: after each input a
// well-behaved client still gets its value.
#include <cstdlib>

#include "chorus/store.h"
#include "fuzz_support.h"
#include "rendezvous/auth.h"
#include "rendezvous/store_protocol.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("CHORUS_LOG_LEVEL", "error", 1);  // every dropped connection logs a warning
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  const Secret secret("fuzz secret");
  TcpStoreServer server("127.0.0.1", 0, secret);
  {
    net::Fd fd = net::connect_tcp({"127.0.0.1", server.port()}, fuzz::io_deadline());
    rendezvous::authenticate_client(fd.get(), secret, rendezvous::kStorePurpose,
                                    fuzz::io_deadline());
    fuzz::Pump pump(fd.get(), data, size);  // returns once the server closed the connection
  }
  TcpStoreClient client("127.0.0.1", server.port(), secret, std::chrono::seconds(5));
  client.set("after", "still serving");
  if (client.get("after", std::chrono::seconds(5)) != "still serving") std::abort();
  return 0;
}
