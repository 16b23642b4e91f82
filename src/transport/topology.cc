#include "transport/topology.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <fstream>
#include <map>

#include "util/net.h"

namespace chorus::transport {
namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The source address the kernel would use to reach host (a UDP "connect" sends nothing).
std::string route_source_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &list) != 0) return "";
  std::string result;
  for (addrinfo* a = list; a && result.empty(); a = a->ai_next) {
    net::Fd fd(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (fd.valid() && ::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
      result = net::local_address(fd.get());
    }
  }
  freeaddrinfo(list);
  return result;
}

std::string first_interface_address() {
  auto all = interface_addresses();
  return all.empty() ? "" : all.front();
}

}  // namespace

std::vector<std::string> interface_addresses() {
  std::vector<std::string> result;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return result;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
    result.emplace_back(buf);
  }
  freeifaddrs(list);
  return result;
}

std::string default_host_id() {
  char host[HOST_NAME_MAX + 1] = {0};
  gethostname(host, sizeof(host) - 1);
  char netns[128] = {0};
  ssize_t n = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  if (n < 0) n = 0;
  return std::string(host) + "/" + read_first_line("/proc/sys/kernel/random/boot_id") + "/" +
         std::string(netns, static_cast<size_t>(n));
}

Topology compute_topology(int rank, const std::vector<std::string>& host_ids) {
  Topology t;
  t.rank = rank;
  t.size = static_cast<int>(host_ids.size());
  std::map<std::string, int> index_of_host;
  t.host_of_rank.resize(host_ids.size());
  for (size_t r = 0; r < host_ids.size(); ++r) {
    auto it = index_of_host.emplace(host_ids[r], static_cast<int>(index_of_host.size())).first;
    t.host_of_rank[r] = it->second;
  }
  t.cross_size = static_cast<int>(index_of_host.size());
  t.cross_rank = t.host_of_rank[rank];
  t.local_rank = 0;
  t.local_size = 0;
  for (int r = 0; r < t.size; ++r) {
    if (t.host_of_rank[r] != t.cross_rank) continue;
    if (r < rank) ++t.local_rank;
    ++t.local_size;
  }
  return t;
}

std::string detect_local_address(const std::string& store_host) {
  std::string address;
  if (!store_host.empty()) address = route_source_address(store_host);
  if (address.empty()) address = first_interface_address();
  return address.empty() ? "127.0.0.1" : address;
}

}  // namespace chorus::transport
