// The HMAC handshake, both roles, against a peer that sends these bytes: each side must end
// with AuthError / IoError (the bytes cannot hold a MAC over its fresh nonce), never accept,
// crash or wait past the end of the stream.
#include <cstdlib>

#include "fuzz_support.h"
#include "rendezvous/auth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  if (size == 0) return 0;
  const bool server = data[0] & 1;
  fuzz::FedSocket socket(data + 1, size - 1);
  const Secret secret("fuzz secret");
  bool accepted = false;
  fuzz::expect_chorus_errors([&] {
    if (server) {
      rendezvous::authenticate_server(socket.fd(), secret, "store", fuzz::io_deadline());
    } else {
      rendezvous::authenticate_client(socket.fd(), secret, "store", fuzz::io_deadline());
    }
    accepted = true;
  });
  if (accepted) std::abort();  // bytes chosen before the nonce cannot prove the secret
  return 0;
}
