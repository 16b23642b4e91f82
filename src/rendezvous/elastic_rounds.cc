#include "rendezvous/elastic_rounds.h"

#include <set>
#include <sstream>

#include "chorus/error.h"

namespace chorus::elastic_rounds {

std::string round_key(int64_t round) { return "elastic/round/" + std::to_string(round); }

std::string ready_key(int64_t round, const std::string& id) {
  return round_key(round) + "/ready/" + id;
}

std::string request_key(int64_t round) { return round_key(round) + "/request"; }

std::string world_prefix(int64_t round) { return "elastic/world/" + std::to_string(round) + "/"; }

std::string encode(const std::vector<Member>& members) {
  std::string text;
  for (const Member& m : members) text += m.id + " " + m.host + "\n";
  return text;
}

std::vector<Member> decode(const std::string& text) {
  std::vector<Member> members;
  std::set<std::string> ids;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream fields(line);
    Member m;
    std::string extra;
    bool ok = static_cast<bool>(fields >> m.id >> m.host) && !(fields >> extra);
    CHORUS_CHECK_ARG(ok, "elastic round: line ", n, " is not 'id host': '", line, "'");
    CHORUS_CHECK_ARG(ids.insert(m.id).second, "elastic round: worker '", m.id, "' listed twice");
    members.push_back(std::move(m));
  }
  return members;
}

int index_of(const std::vector<Member>& members, const std::string& id) {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace chorus::elastic_rounds
