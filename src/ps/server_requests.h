// One connection's requests on a parameter server (docs/wire_format.md, "Parameter
// server"). Each request's bulk length is checked against the ps's layout before anything
// is allocated or received; a mismatch, a malformed meta section or an unknown type drops
// the connection (the stream can no longer be trusted), while a request that breaks a rule
// of the ps (pull before create, a kSync tag from the future) gets a kError reply and the
// connection stays open.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ps_state.h"
#include "rendezvous/connection_server.h"
#include "util/net.h"
#include "wire.h"

namespace chorus::ps {

// fd, peer, thread and done come from the ConnectionServer that runs the connection.
struct Connection : rendezvous::Connection {
  std::vector<float> scratch;  // pushed gradients / pulled values, reused across requests
};

struct RequestContext {
  PsState& state;
  Connection& conn;
  std::function<void()> on_shutdown;  // a client asked the server to exit
};

// Answers one request whose header and meta have been read. Returns false when the
// connection must be closed; throws IoError / TimeoutError when it broke.
bool handle_request(RequestContext& ctx, const wire::Header& header, const std::string& meta);

}  // namespace chorus::ps
