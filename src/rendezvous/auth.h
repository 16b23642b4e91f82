// Mutual HMAC-SHA256 challenge-response, run on a freshly connected socket before any other
// byte is trusted. Each side proves it knows the job secret with a MAC over fresh nonces
// from both sides and over `purpose` ("store", "peer", ...), so a recorded handshake cannot
// be replayed and a handshake for one purpose cannot be reused for another.
// Throws AuthError (wrong secret, bad magic/version, garbage), IoError (connection lost),
// TimeoutError (deadline passed).
#pragma once

#include <string>

#include "chorus/store.h"
#include "util/deadline.h"

namespace chorus::rendezvous {

void authenticate_client(int fd, const Secret& secret, const std::string& purpose,
                         Deadline deadline);
void authenticate_server(int fd, const Secret& secret, const std::string& purpose,
                         Deadline deadline);

}  // namespace chorus::rendezvous
