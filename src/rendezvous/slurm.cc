#include "rendezvous/slurm.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <arpa/inet.h>

#include <cctype>
#include <limits>

#include "chorus/error.h"

namespace chorus::slurm {
namespace {

// Errors quote the whole list: the fault is easiest to see in context.
struct ListContext {
  const std::string& what;
  const std::string& text;
};

[[noreturn]] void malformed(const ListContext& c, const std::string& why) {
  CHORUS_THROW(InvalidArgument, c.what, "='", c.text, "' is not a valid Slurm host list: ", why);
}

bool is_name_char(char ch) {
  return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.' || ch == '_';
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char ch : s) {
    if (!std::isdigit(static_cast<unsigned char>(ch))) return false;
  }
  return true;
}

// Splits at the commas that are not inside brackets, checking the brackets on the way.
std::vector<std::string> split_hosts(const ListContext& c) {
  std::vector<std::string> parts;
  std::string part;
  bool open = false;
  for (char ch : c.text) {
    if (ch == '[' && open) malformed(c, "nested '['");
    if (ch == ']' && !open) malformed(c, "']' without '['");
    if (ch == '[' || ch == ']') open = ch == '[';
    if (ch == ',' && !open) {
      if (part.empty()) malformed(c, "empty host name");
      parts.push_back(part);
      part.clear();
      continue;
    }
    part += ch;
  }
  if (open) malformed(c, "unclosed '['");
  if (part.empty()) malformed(c, "empty host name");
  parts.push_back(part);
  return parts;
}

uint64_t parse_bound(const ListContext& c, const std::string& digits) {
  if (!all_digits(digits)) malformed(c, "'" + digits + "' in a range is not a number");
  if (digits.size() > 18) malformed(c, "'" + digits + "' in a range is too long");
  return std::stoull(digits);
}

std::string padded(uint64_t n, size_t width) {
  std::string s = std::to_string(n);
  return s.size() < width ? std::string(width - s.size(), '0') + s : s;
}

// The inside of one bracket, "1-3,05": the numbers as text, each padded to the width of its
// range's lower bound as written.
std::vector<std::string> expand_ranges(const ListContext& c, const std::string& inside) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = inside.find(',', start);
    std::string range = inside.substr(start, comma == std::string::npos ? comma : comma - start);
    size_t dash = range.find('-');
    std::string lo_text = range.substr(0, dash);
    uint64_t lo = parse_bound(c, lo_text);
    uint64_t hi = dash == std::string::npos ? lo : parse_bound(c, range.substr(dash + 1));
    if (hi < lo) malformed(c, "range '" + range + "' is descending");
    if (hi - lo >= kMaxHosts - out.size())
      malformed(c, "more than " + std::to_string(kMaxHosts) + " hosts");
    for (uint64_t n = lo; n <= hi; ++n) out.push_back(padded(n, lo_text.size()));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

void check_name_part(const ListContext& c, const std::string& part) {
  for (char ch : part) {
    if (!is_name_char(ch)) malformed(c, std::string("character '") + ch + "' in a host name");
  }
}

// One host expression, "r[1-2]n[01-03]", appended to `out` (every combination, in order).
void expand_host(const ListContext& c, const std::string& prefix, const std::string& rest,
                 std::vector<std::string>& out) {
  size_t open = rest.find('[');
  if (open == std::string::npos) {
    check_name_part(c, rest);
    if (out.size() >= kMaxHosts) malformed(c, "more than " + std::to_string(kMaxHosts) + " hosts");
    out.push_back(prefix + rest);
    return;
  }
  size_t close = rest.find(']', open);  // split_hosts checked that it exists
  check_name_part(c, rest.substr(0, open));
  std::string head = prefix + rest.substr(0, open);
  std::string tail = rest.substr(close + 1);
  for (const std::string& number : expand_ranges(c, rest.substr(open + 1, close - open - 1))) {
    expand_host(c, head + number, tail, out);
  }
}

[[noreturn]] void bad_counts(const std::string& what, const std::string& text,
                             const std::string& why) {
  CHORUS_THROW(InvalidArgument, what, "='", text,
               "' is not a valid Slurm tasks-per-node list: ", why);
}

int parse_count(const std::string& what, const std::string& text, const std::string& digits) {
  if (!all_digits(digits) || digits.size() > 9 || std::stoi(digits) < 1) {
    bad_counts(what, text, "'" + digits + "' is not a positive integer");
  }
  return std::stoi(digits);
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& what) {
  ListContext c{what, list};
  if (list.empty()) malformed(c, "it is empty");
  std::vector<std::string> hosts;
  for (const std::string& part : split_hosts(c)) expand_host(c, "", part, hosts);
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& text, const std::string& what) {
  if (text.empty()) bad_counts(what, text, "it is empty");
  std::vector<int> counts;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    int repeat = 1;
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') bad_counts(what, text, "'" + item + "' lacks its ')'");
      repeat = parse_count(what, text, item.substr(paren + 2, item.size() - paren - 3));
      item.resize(paren);
    }
    int tasks = parse_count(what, text, item);
    if (static_cast<size_t>(repeat) > kMaxHosts - counts.size()) {
      bad_counts(what, text, "more than " + std::to_string(kMaxHosts) + " nodes");
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), tasks);
    if (comma == std::string::npos) return counts;
    start = comma + 1;
  }
}

uint16_t store_port(uint64_t job_id, uint64_t step_id) {
  // Slurm's ids are 32-bit: the product cannot overflow.
  uint64_t mixed = (job_id % (uint64_t{1} << 32)) * 97 + step_id % (uint64_t{1} << 32);
  return static_cast<uint16_t>(kPortBase + mixed % kPortCount);
}

std::string resolve_address(const std::string& host, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc != 0 || list == nullptr) {
    CHORUS_THROW(InvalidArgument, "cannot resolve ", what, " '", host, "': ", gai_strerror(rc));
  }
  const addrinfo* pick = list;
  for (const addrinfo* a = list; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  char buf[INET6_ADDRSTRLEN] = {0};
  const void* addr =
      pick->ai_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(pick->ai_addr)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(pick->ai_addr)->sin6_addr);
  ::inet_ntop(pick->ai_family, addr, buf, sizeof(buf));
  ::freeaddrinfo(list);
  return buf;
}

bool is_loopback_address(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address.rfind("::ffff:127.", 0) == 0;
}

}  // namespace chorus::slurm
