// A parameter server: holds its shards of the variables and their optimizer slots, answers
// pulls, applies pushed gradients (docs/ps.md). One thread per authenticated connection
// (purpose "ps"), like the rendezvous store; every frame is length- and schema-checked
// against the layout before anything is allocated (docs/wire_format.md, "Parameter
// server"). Nothing from the wire is executed: frames carry numbers, never code.
//
// Thread safety: all public members may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "chorus/ps/cluster.h"
#include "chorus/store.h"

namespace chorus::ps {

struct ServerOptions {
  std::chrono::milliseconds handshake_timeout{10000};
  int max_clients = 256;
};

class ParameterServer {
 public:
  // Binds host:port (0: any free port) and starts serving. Throws IoError when the address
  // cannot be bound, InvalidArgument without a secret.
  ParameterServer(const std::string& host, uint16_t port, Secret secret,
                  ServerOptions options = {});
  ~ParameterServer();  // stop()
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  uint16_t port() const;
  // Blocks until a client asks this server to shut down, or stop() is called.
  void wait();
  // Closes every connection; pulls waiting in the server return an error to their client.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The whole life of a ps task: serves spec.address() until the chief shuts the cluster
// down. REQUIRES spec.role == Role::kPs.
void run_parameter_server(const ClusterSpec& spec, const Secret& secret,
                          ServerOptions options = {});

}  // namespace chorus::ps
