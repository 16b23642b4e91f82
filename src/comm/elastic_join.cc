#include "comm/elastic_join.h"

#include <thread>

#include "chorus/error.h"
#include "rendezvous/elastic_rounds.h"
#include "util/deadline.h"
#include "util/log.h"

namespace chorus::comm {
namespace er = elastic_rounds;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(10);

// Waits until every member of `round` is ready; false when a newer round appeared first.
bool all_ready(Store& store, int64_t round, const std::vector<er::Member>& members,
               const Deadline& deadline) {
  std::vector<std::string> keys;
  for (const er::Member& m : members) keys.push_back(er::ready_key(round, m.id));
  for (;;) {
    if (store.check(keys)) return true;
    if (latest_elastic_round(store) != round) return false;
    if (deadline.expired()) {
      CHORUS_THROW(TimeoutError, "elastic round ", round, ": not every one of its ", members.size(),
                   " workers became ready in time");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

int64_t latest_elastic_round(Store& store) {
  if (!store.check({er::kLatestKey})) return -1;
  std::string text = store.get(er::kLatestKey, std::chrono::milliseconds(1000));
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    CHORUS_THROW(InvalidArgument, "elastic: the store's ", er::kLatestKey, " is '", text,
                 "', not a round number");
  }
}

ElasticWorld join_elastic_round(Store& store, const std::string& id, int64_t after,
                                const CommunicatorOptions& options,
                                std::chrono::milliseconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  int64_t want = after + 1;
  int64_t leaving = after;  // the round whose world this worker left (asks for a new one)
  for (;;) {
    const int64_t latest = latest_elastic_round(store);
    if (latest < want) {
      if (leaving >= 0 && !store.check({er::request_key(leaving)})) {
        store.set(er::request_key(leaving), id);
      }
      if (deadline.expired()) {
        CHORUS_THROW(TimeoutError, "elastic worker ", id, ": no new round from the launcher in ",
                     timeout.count() / 1000.0, " s (after round ", after, ")");
      }
      std::this_thread::sleep_for(kPoll);
      continue;
    }
    const auto members = er::decode(store.get(er::round_key(latest), timeout));
    const int rank = er::index_of(members, id);
    if (rank < 0) {
      if (after >= 0) {
        CHORUS_THROW(IoError, "elastic worker ", id, " is no longer part of the job (round ",
                     latest, " leaves it out)");
      }
      want = latest + 1;  // a newcomer: a later round will list it
      continue;
    }
    store.set(er::ready_key(latest, id), "1");
    if (!all_ready(store, latest, members, deadline)) continue;
    ElasticWorld joined;
    joined.round = latest;
    joined.store = std::make_unique<PrefixStore>(er::world_prefix(latest), store);
    try {
      joined.world =
          Communicator::create(*joined.store, rank, static_cast<int>(members.size()), options);
      CHORUS_LOG(kInfo, "elastic") << "worker " << id << " is rank " << rank << " of "
                                   << members.size() << " in round " << latest;
      return joined;
    } catch (const AuthError&) {
      throw;
    } catch (const Error& e) {
      // A member went away while the world formed: the launcher publishes a round without it.
      if (dynamic_cast<const InvalidArgument*>(&e) || deadline.expired()) throw;
      CHORUS_LOG(kWarning, "elastic") << "round " << latest << " did not form: " << e.what();
      want = latest + 1;
      leaving = latest;
    }
  }
}

}  // namespace chorus::comm
