// The client side of the parameter servers, used by the chief (create the variables, save
// and restore their state, shut the servers down) and by workers (pull parameters, push
// gradients). One connection per ps, opened lazily and kept.
//
// Versions: each ps counts the updates it applied. In UpdateMode::kSync a pull may ask for
// `min_version` and waits until every ps has reached it; a push carries the version its
// gradients were computed from, and pushes for an older version are dropped (counted in
// Stats::pushes_dropped) so a retried step cannot apply twice in one round.
//
// Errors: a ps that cannot be reached, closes, times out, or replies with something
// malformed (trailing bytes, an invalid layout, a save of the wrong size) is
// UnavailableError ("parameter server 1 (127.0.0.1:4711) is unavailable: ..."); a layout or
// size mismatch on this side is InvalidArgument. After an UnavailableError the client is
// unusable.
//
// Thread safety: one thread at a time per client.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/ps/optimizer.h"
#include "chorus/ps/partitioner.h"
#include "chorus/store.h"

namespace chorus::ps {

struct ModelLayout {
  std::vector<VariableSpec> variables;
  std::vector<Shard> shards;  // from round_robin() or size_balanced()
};

struct CreateOptions {
  OptimizerConfig optimizer;
  UpdateMode mode = UpdateMode::kAsync;
  int num_workers = 1;  // pushes per round in kSync
};

struct PsStats {
  int64_t version = 0;  // updates applied
  int64_t pushes_applied = 0;
  int64_t pushes_dropped = 0;  // stale kSync pushes
  int64_t elements = 0;        // float32 elements held
};

class PsClient {
 public:
  // `timeout` bounds connecting (ps tasks may still be starting: retried until then) and
  // every later wait (CHORUS_TIMEOUT_SECONDS by default).
  PsClient(std::vector<std::string> ps_addresses, Secret secret,
           std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  int num_ps() const;

  // Chief: sends every ps its shards with their initial values (initial[i] holds
  // variables[i].numel floats) and the optimizer; replaces whatever the ps held.
  void create(const ModelLayout& layout, const std::vector<const float*>& initial,
              const CreateOptions& options);
  // Workers: waits until the chief has created the variables and returns the layout.
  // InvalidArgument when the names or sizes differ from `expected` (a different program);
  // an empty `expected` takes whatever the chief created. TimeoutError naming the ps that
  // still have no variables after the timeout.
  const ModelLayout& wait_for_variables(const std::vector<VariableSpec>& expected);

  // Copies every variable into dst[i]. Returns the lowest ps version seen. A ps whose
  // version does not reach `min_version` within the timeout answers so: TimeoutError (the
  // client stays usable); a ps that does not answer at all is UnavailableError.
  int64_t pull(const std::vector<float*>& dst, int64_t min_version = 0);
  // Sends the gradients (grads[i] matches variables[i]). learning_rate < 0 keeps the
  // ps's; otherwise it becomes the ps's learning rate from this update on.
  void push(const std::vector<const float*>& grads, int64_t version, double learning_rate = -1);

  // Everything the ps tasks hold (values, slots, step counters, versions, optimizer) as
  // checkpoint files: "ps-<index>" -> bytes.
  std::map<std::string, std::string> save_state();
  // After create() with the same layout: puts saved state back. InvalidArgument when the
  // files do not match the layout.
  void restore_state(const std::map<std::string, std::string>& files);

  PsStats stats(int ps_index);
  // Asks every reachable ps to exit (run_parameter_server returns); errors are ignored.
  void shutdown_servers();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::ps
