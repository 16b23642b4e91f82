// Where ranks live: host identities, the Topology computed from them, and the address this
// host is reached at. Pure functions, so the mesh's bookkeeping is testable without sockets.
#pragma once

#include <string>
#include <vector>

#include "transport/mesh.h"

namespace chorus::transport {

// hostname + "/" + boot id + "/" + network namespace ("net:[4026531840]"): ranks on one
// machine but in different network namespaces (as in tests) count as different hosts, which
// matches where abstract Unix sockets (and so shared-memory setup) can reach.
std::string default_host_id();

// Topology of `rank` given every rank's host id (index = rank). Hosts are numbered in order
// of their lowest rank; local ranks in order of rank.
Topology compute_topology(int rank, const std::vector<std::string>& host_ids);

// A local address that peers on other hosts can reach: the source address of the route to
// `store_host` when given (the interface that reaches the store), else the first
// non-loopback IPv4 address of an interface that is up, else loopback.
std::string detect_local_address(const std::string& store_host);

// The IPv4 addresses of this host's interfaces that are up, loopback left out, in the
// kernel's order.
std::vector<std::string> interface_addresses();

}  // namespace chorus::transport
