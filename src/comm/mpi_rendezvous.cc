// meet_through_mpi (mpi_bootstrap.h): the offer rank 0 broadcasts is text,
//   "chorus-mpi-1\n<port>\n<address> <address> ...\n<secret, or empty when it was given>"
// (a generated secret is hexadecimal: no newline in it).
#include <map>
#include <sstream>

#include "chorus/error.h"
#include "comm/mpi_bootstrap.h"
#include "transport/topology.h"
#include "util/env.h"

namespace chorus::mpi {
namespace {

constexpr char kMagic[] = "chorus-mpi-1";
constexpr auto kProbeTimeout = std::chrono::seconds(2);

struct Offer {
  uint16_t port = 0;
  std::vector<std::string> addresses;
  std::string secret;
};

std::string encode(const Offer& offer) {
  std::string text = std::string(kMagic) + "\n" + std::to_string(offer.port) + "\n";
  for (size_t i = 0; i < offer.addresses.size(); ++i) {
    text += (i ? " " : "") + offer.addresses[i];
  }
  return text + "\n" + offer.secret;
}

Offer decode(const std::string& text) {
  std::istringstream in(text);
  std::string magic, port, addresses;
  Offer offer;
  if (!std::getline(in, magic) || magic != kMagic || !std::getline(in, port) ||
      !std::getline(in, addresses)) {
    CHORUS_THROW(IoError, "MPI bootstrap: rank 0's offer is malformed");
  }
  offer.port = static_cast<uint16_t>(std::stoi(port));
  std::istringstream words(addresses);
  for (std::string a; words >> a;) offer.addresses.push_back(a);
  std::getline(in, offer.secret, '\0');
  return offer;
}

// The index of the first offered address where the store lets this rank in, or -1. A full
// client (authenticated) rather than a bare connect: the secret is checked too, and the
// store logs no half-open connection.
int reach(const Offer& offer, const Secret& secret) {
  for (size_t i = 0; i < offer.addresses.size(); ++i) {
    try {
      TcpStoreClient(offer.addresses[i], offer.port, secret, kProbeTimeout);
      return static_cast<int>(i);
    } catch (const Error&) {
    }
  }
  return -1;
}

std::string where(const Offer& offer) {
  std::string text;
  for (const auto& a : offer.addresses)
    text += (text.empty() ? "" : ", ") + a + ":" + std::to_string(offer.port);
  return text;
}

[[noreturn]] void unreachable(const std::string& ranks, const Offer& offer) {
  CHORUS_THROW(IoError, "bare mpirun job: rank(s) ", ranks, " could not reach rank 0's store at ",
               where(offer),
               " (set CHORUS_BIND_ADDRESS on rank 0's host to an address every host reaches, "
               "or MASTER_ADDR and MASTER_PORT)");
}

}  // namespace

Meeting meet_through_mpi(const JobEnv& env, const Secret& given) {
  Meeting meeting;
  Offer offer;
  if (env.rank == 0) {
    meeting.secret = given.bytes().empty() ? Secret::generate() : given;
    auto bind = env_string("CHORUS_BIND_ADDRESS");
    const bool one_host = env.local_size == env.size;
    const std::string host = bind ? *bind : one_host ? "127.0.0.1" : "0.0.0.0";
    meeting.server = std::make_unique<TcpStoreServer>(host, 0, meeting.secret);
    offer.port = meeting.server->port();
    offer.addresses =
        host == "0.0.0.0" ? transport::interface_addresses() : std::vector<std::string>{host};
    if (offer.addresses.empty()) offer.addresses.push_back("127.0.0.1");
    if (given.bytes().empty()) offer.secret = meeting.secret.bytes();
    auto answers = offer_and_collect(encode(offer), [](const std::string&) { return 0; });
    std::map<int, int> votes;  // address index -> ranks that reached it
    std::string lost;
    for (size_t r = 1; r < answers.size(); ++r) {
      if (answers[r] < 0 || answers[r] >= static_cast<int>(offer.addresses.size())) {
        lost += (lost.empty() ? "" : ", ") + std::to_string(r);
      } else {
        ++votes[answers[r]];
      }
    }
    if (!lost.empty()) unreachable(lost, offer);
    int best = 0;
    for (const auto& [index, count] : votes) {
      if (count > votes[best]) best = index;
    }
    meeting.store = {offer.addresses[best], offer.port};
  } else {
    int mine = -1;
    offer_and_collect("", [&](const std::string& text) {
      offer = decode(text);
      meeting.secret = offer.secret.empty() ? given : Secret(offer.secret);
      return mine = reach(offer, meeting.secret);
    });
    if (mine < 0) unreachable(std::to_string(env.rank), offer);
    meeting.store = {offer.addresses[mine], offer.port};
  }
  return meeting;
}

}  // namespace chorus::mpi
