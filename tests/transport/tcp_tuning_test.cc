// Congestion control of peer TCP sockets (MeshOptions::tcp_congestion): both ends of every
// link — the connecting socket and the one accepted from the listener — get the chosen
// algorithm; "system" keeps the kernel default; refused or malformed values are an
// InvalidArgument on every rank, before any connection is made.
#include <gtest/gtest.h>

#include <fstream>

#include "chorus/error.h"
#include "mesh_harness.h"
#include "util/net.h"

namespace chorus::transport {
namespace {

using testing::options;
using testing::run_ranks;
using testing::TestStore;
using testing::what;

std::string system_default() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  in >> name;
  return name;
}

bool kernel_accepts(const std::string& name) {
  net::SocketTuning t;
  t.congestion = {name};
  t.congestion_required = true;
  try {
    net::check_tuning(t);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

// The congestion control of every link of a 3-rank TCP mesh, per rank and peer.
std::vector<std::vector<std::string>> link_algorithms(const std::string& tcp_congestion) {
  TestStore store;
  std::vector<std::vector<std::string>> seen(3, std::vector<std::string>(3));
  auto errors = run_ranks(3, [&](int rank) {
    auto client = store.client("cc/");
    MeshOptions o = options(TransportKind::kTcp, store.secret());
    o.tcp_congestion = tcp_congestion;
    auto mesh = connect_mesh(*client, rank, 3, o);
    for (int p = 0; p < 3; ++p) {
      if (p != rank) seen[rank][p] = net::congestion_control(mesh->link(p).poll_fd());
    }
  });
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(errors[r]) << "rank " << r << ": " << what(errors[r]);
  return seen;
}

void expect_every_link_uses(const std::string& tcp_congestion, const std::string& expected) {
  auto seen = link_algorithms(tcp_congestion);
  for (int r = 0; r < 3; ++r) {
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      EXPECT_EQ(seen[r][p], expected) << "rank " << r << " to " << p;
    }
  }
}

TEST(TcpCongestion, AutoPrefersCubicThenReno) {
  expect_every_link_uses("auto", kernel_accepts("cubic") ? "cubic" : "reno");
}

TEST(TcpCongestion, AnExplicitListTakesTheFirstAccepted) {
  ASSERT_TRUE(kernel_accepts("reno"));  // built into every kernel, allowed by default
  expect_every_link_uses("no_such_cc,reno", "reno");
}

TEST(TcpCongestion, SystemKeepsTheKernelDefault) {
  expect_every_link_uses("system", system_default());
}

TEST(TcpCongestion, RefusedAlgorithmIsInvalidOnEveryRankWithoutWaiting) {
  TestStore store;
  auto errors = run_ranks(2, [&](int rank) {
    auto client = store.client("refused/");
    MeshOptions o = options(TransportKind::kTcp, store.secret(), std::chrono::seconds(30));
    o.tcp_congestion = "no_such_cc";
    connect_mesh(*client, rank, 2, o);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]);
    EXPECT_THROW(std::rethrow_exception(errors[r]), InvalidArgument);
    EXPECT_NE(what(errors[r]).find("'no_such_cc': the kernel accepts none"), std::string::npos)
        << what(errors[r]);
    EXPECT_NE(what(errors[r]).find("available: "), std::string::npos) << what(errors[r]);
  }
}

TEST(TcpCongestion, MalformedValuesAreInvalid) {
  for (const char* bad : {"", "Cubic", "cubic,", "a b", "x_very_long_name_here"}) {
    try {
      peer_socket_tuning(bad, 0);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("expected auto, system or a comma-separated list"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace chorus::transport
