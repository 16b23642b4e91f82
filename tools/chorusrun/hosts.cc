#include "hosts.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "options.h"

namespace chorus::run {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool valid_host_name(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  return std::all_of(host.begin(), host.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':';
  });
}

int parse_slots(const std::string& text, const std::string& context) {
  bool digits =
      !text.empty() && text.size() <= 6 &&
      std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
  int n = digits ? std::stoi(text) : 0;
  if (n <= 0)
    throw UsageError("malformed host entry '" + context + "': slots must be a positive integer");
  return n;
}

HostSlots parse_entry(const std::string& entry) {
  HostSlots hs;
  std::string e = trim(entry);
  auto colon = e.rfind(':');
  // "[v6]:n" or "name:n"; a bare IPv6 address without brackets has several colons.
  bool has_slots = colon != std::string::npos && e.find(':') == colon;
  if (!e.empty() && e[0] == '[') {
    auto close = e.find(']');
    if (close == std::string::npos) throw UsageError("malformed host entry '" + entry + "'");
    hs.host = e.substr(1, close - 1);
    if (close + 1 < e.size()) {
      if (e[close + 1] != ':') throw UsageError("malformed host entry '" + entry + "'");
      hs.slots = parse_slots(e.substr(close + 2), entry);
    }
  } else if (has_slots) {
    hs.host = e.substr(0, colon);
    hs.slots = parse_slots(e.substr(colon + 1), entry);
  } else {
    hs.host = e;
  }
  if (!valid_host_name(hs.host)) throw UsageError("malformed host entry '" + entry + "'");
  return hs;
}

// The most slots one host may have, given once (six digits) or summed over repeats.
constexpr int kMaxSlots = 999999;

// Merges repeated hosts (a:1,a:1 is a:2), keeping first-seen order.
std::vector<HostSlots> merge(const std::vector<HostSlots>& in) {
  std::vector<HostSlots> out;
  for (const HostSlots& h : in) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const HostSlots& o) { return o.host == h.host; });
    if (it == out.end()) {
      out.push_back(h);
    } else if (it->slots > kMaxSlots - h.slots) {  // not the int sum: it could overflow
      throw UsageError("host '" + h.host + "' is given more than " + std::to_string(kMaxSlots) +
                       " slots in all");
    } else {
      it->slots += h.slots;
    }
  }
  return out;
}

}  // namespace

std::vector<HostSlots> parse_host_list(const std::string& text) {
  std::vector<HostSlots> hosts;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    hosts.push_back(parse_entry(text.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return merge(hosts);
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read hostfile '" + path + "'");
  std::vector<HostSlots> hosts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    auto space = line.find_first_of(" \t");
    std::string head = line.substr(0, space);
    std::string rest = space == std::string::npos ? "" : trim(line.substr(space));
    if (rest.empty()) {
      hosts.push_back(parse_entry(head));
    } else if (rest.rfind("slots=", 0) == 0) {
      hosts.push_back(parse_entry(head));
      hosts.back().slots = parse_slots(rest.substr(6), line);
    } else {
      throw UsageError(path + ":" + std::to_string(n) +
                       ": expected 'host', 'host:N' or 'host slots=N'");
    }
  }
  if (hosts.empty()) throw UsageError("hostfile '" + path + "' lists no hosts");
  return merge(hosts);
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return false;
  std::string self = name;
  return host == self || host == self.substr(0, self.find('.'));
}

void check_resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (list) ::freeaddrinfo(list);
  if (rc != 0) throw UsageError("unknown host '" + host + "': " + gai_strerror(rc));
}

std::vector<Placement> place_ranks(const std::vector<HostSlots>& hosts, int np, bool oversubscribe,
                                   const char* noun) {
  int total = 0;
  for (const HostSlots& h : hosts) total += h.slots;
  if (np > total && !oversubscribe) {
    throw UsageError(std::to_string(np) + " " + noun + " do not fit in " + std::to_string(total) +
                     " slots (add slots with -H host:N, or pass --oversubscribe)");
  }
  std::vector<int> host_of(np);
  std::vector<int> used(hosts.size(), 0);
  int r = 0;
  for (size_t h = 0; h < hosts.size() && r < np; ++h) {
    for (int s = 0; s < hosts[h].slots && r < np; ++s, ++r)
      host_of[r] = static_cast<int>(h), ++used[h];
  }
  for (size_t h = 0; r < np; h = (h + 1) % hosts.size(), ++r)
    host_of[r] = static_cast<int>(h), ++used[h];
  // Hosts that got no rank are not part of the job (cross ranks count only used hosts).
  std::vector<int> cross(hosts.size(), -1);
  int cross_size = 0;
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (used[h] > 0) cross[h] = cross_size++;
  }
  std::vector<Placement> out(np);
  std::vector<int> next_local(hosts.size(), 0);
  for (int k = 0; k < np; ++k) {
    int h = host_of[k];
    out[k] =
        Placement{k,        hosts[h].host, is_local_host(hosts[h].host), next_local[h]++, used[h],
                  cross[h], cross_size};
  }
  return out;
}

}  // namespace chorus::run
