// An elastic worker's side of the launcher's rounds (rendezvous/elastic_rounds.h): waits
// for a round that lists this worker, meets the round's other members and forms their
// world. Used by chorus::Job for workers started with CHORUS_ELASTIC_ID.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "chorus/communicator.h"
#include "chorus/store.h"

namespace chorus::comm {

struct ElasticWorld {
  int64_t round = -1;
  std::unique_ptr<PrefixStore> store;  // the round's keys; outlives `world`, declared first
  std::unique_ptr<Communicator> world;
};

// Joins the first round after `after` (-1: the first one) that lists `id`. Having left
// round `after` (after >= 0), the worker asks the launcher for a new round unless one is
// published already. A round that moves on while its members meet is left for the newer
// one. Throws IoError when a round after `after` no longer lists this worker (the launcher
// let it go), TimeoutError when no round to form comes within `timeout`, and what
// Communicator::create throws for reasons other than a member gone (AuthError ...).
ElasticWorld join_elastic_round(Store& store, const std::string& id, int64_t after,
                                const CommunicatorOptions& options,
                                std::chrono::milliseconds timeout);

// The newest round the launcher has published (-1 before the first).
int64_t latest_elastic_round(Store& store);

}  // namespace chorus::comm
