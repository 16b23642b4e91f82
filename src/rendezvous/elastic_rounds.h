// The store protocol of an elastic job (docs/elastic.md): chorusrun decides who is in the
// job, the workers follow. Each membership is a numbered round; the launcher writes a
// round's member list, then moves "elastic/latest" to it. A worker (CHORUS_ELASTIC_ID)
// takes its rank from its place in the latest round that lists it, marks itself ready in
// that round and forms the world with the others once all are ready; a worker that has to
// leave a round without the launcher having noticed why (a collective failed but nobody
// exited) asks for a new one under request_key(round).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::elastic_rounds {

inline const std::string kLatestKey = "elastic/latest";

struct Member {
  std::string id;    // the worker's CHORUS_ELASTIC_ID, unique within the job
  std::string host;  // where it runs (its CHORUS_HOST_ID)
};

std::string round_key(int64_t round);
std::string ready_key(int64_t round, const std::string& id);
std::string request_key(int64_t round);
// Where the members of `round` meet to form their world (a PrefixStore prefix).
std::string world_prefix(int64_t round);

// One "id host" line per member, in rank order.
std::string encode(const std::vector<Member>& members);
// InvalidArgument naming the line when a line is not "id host" or an id repeats.
std::vector<Member> decode(const std::string& text);
// The position of `id` in `members`, -1 if absent.
int index_of(const std::vector<Member>& members, const std::string& id);

}  // namespace chorus::elastic_rounds
