// Meshes with ranks as threads of one process over a real TcpStoreServer: every transport
// and world size, all-pairs exchanges, topology with forced host ids, and setup failures
// (missing rank, wrong secret, stray connections, shm forced across hosts).
#include <gtest/gtest.h>

#include <atomic>
#include <functional>

#include "chorus/error.h"
#include "mesh_harness.h"
#include "rendezvous/auth.h"
#include "transport/abort_notes.h"
#include "transport/handshake.h"
#include "util/net.h"

namespace chorus::transport {
namespace {

using testing::exchange_all_pairs;
using testing::options;
using testing::run_ranks;
using testing::TestStore;
using testing::what;

const char* kind_name(TransportKind k) {
  return k == TransportKind::kTcp ? "tcp" : k == TransportKind::kShm ? "shm" : "auto";
}

class MeshAllPairs : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {};

TEST_P(MeshAllPairs, ExchangesRandomBytesBetweenEveryPair) {
  auto [kind, size] = GetParam();
  TestStore store;
  std::vector<size_t> sizes = {0, 1, 7, (size_t{4} << 20) + 3};  // the last exceeds a ring
  auto errors = run_ranks(size, [&](int rank) {
    auto client = store.client("mesh/");
    auto mesh = connect_mesh(*client, rank, size, options(kind, store.secret()));
    ASSERT_EQ(mesh->rank(), rank);
    ASSERT_EQ(mesh->size(), size);
    EXPECT_EQ(mesh->topology().local_size, size);
    EXPECT_EQ(mesh->topology().cross_size, 1);
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      std::string expect = kind == TransportKind::kTcp ? "tcp to rank " : "shm to rank ";
      EXPECT_EQ(mesh->link(p).describe().rfind(expect + std::to_string(p), 0), 0u)
          << mesh->link(p).describe();
      EXPECT_EQ(mesh->link(p).peer(), p);
    }
    for (size_t n : sizes) EXPECT_EQ(exchange_all_pairs(*mesh, n), 0) << n << " bytes";
  });
  for (int r = 0; r < size; ++r) EXPECT_FALSE(errors[r]) << "rank " << r << ": " << what(errors[r]);
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<TransportKind, int>>& info) {
  return std::string(kind_name(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(KindsAndSizes, MeshAllPairs,
                         ::testing::Combine(::testing::Values(TransportKind::kTcp,
                                                              TransportKind::kShm),
                                            ::testing::Range(1, 9)),
                         param_name);
// On one host auto means shm; a couple of sizes check that it is so.
INSTANTIATE_TEST_SUITE_P(Auto, MeshAllPairs,
                         ::testing::Combine(::testing::Values(TransportKind::kAuto),
                                            ::testing::Values(1, 3)),
                         param_name);

TEST(Mesh, AutoRingSizeKeepsEachRanksRingsWithin64MiB) {
  constexpr size_t KiB = size_t{1} << 10, MiB = size_t{1} << 20;
  EXPECT_EQ(auto_shm_ring_bytes(1), 4 * MiB);
  EXPECT_EQ(auto_shm_ring_bytes(2), 4 * MiB);
  EXPECT_EQ(auto_shm_ring_bytes(9), 4 * MiB);   // 16 rings x 4 MiB = 64 MiB
  EXPECT_EQ(auto_shm_ring_bytes(10), 2 * MiB);  // 18 rings: 4 MiB would be 72
  EXPECT_EQ(auto_shm_ring_bytes(33), 1 * MiB);  // 64 rings
  EXPECT_EQ(auto_shm_ring_bytes(64), 512 * KiB);
  EXPECT_EQ(auto_shm_ring_bytes(1000), 256 * KiB);  // the floor, past the budget
}

TEST(Mesh, ForcedHostIdsGiveTopologyAndLinkKinds) {
  TestStore store;
  // Ranks 0 and 2 on host "A", 1 and 3 on host "B".
  std::vector<Topology> topo(4);
  auto errors = run_ranks(4, [&](int rank) {
    auto client = store.client("topo/");
    MeshOptions o = options(TransportKind::kAuto, store.secret());
    o.host_id = rank % 2 == 0 ? "A" : "B";
    auto mesh = connect_mesh(*client, rank, 4, o);
    topo[rank] = mesh->topology();
    for (int p = 0; p < 4; ++p) {
      if (p == rank) continue;
      const char* expect = p % 2 == rank % 2 ? "shm" : "tcp";
      EXPECT_EQ(mesh->link(p).describe().substr(0, 3), expect) << rank << "->" << p;
    }
    EXPECT_EQ(exchange_all_pairs(*mesh, 12345), 0);
  });
  for (int r = 0; r < 4; ++r) ASSERT_FALSE(errors[r]) << "rank " << r << ": " << what(errors[r]);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(topo[r].local_rank, r / 2);
    EXPECT_EQ(topo[r].local_size, 2);
    EXPECT_EQ(topo[r].cross_rank, r % 2);
    EXPECT_EQ(topo[r].cross_size, 2);
    EXPECT_EQ(topo[r].host_of_rank, (std::vector<int>{0, 1, 0, 1}));
  }
}

TEST(Mesh, ShmForcedAcrossHostsIsInvalidOnEveryRank) {
  TestStore store;
  auto errors = run_ranks(2, [&](int rank) {
    auto client = store.client("x/");
    MeshOptions o = options(TransportKind::kShm, store.secret(), std::chrono::seconds(5));
    o.host_id = rank == 0 ? "A" : "B";
    connect_mesh(*client, rank, 2, o);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]);
    EXPECT_THROW(std::rethrow_exception(errors[r]), InvalidArgument);
    EXPECT_NE(what(errors[r]).find("different hosts"), std::string::npos) << what(errors[r]);
  }
}

TEST(Mesh, MissingRankIsATimeoutNamingIt) {
  TestStore store;
  auto start = Clock::now();
  auto errors = run_ranks(2, [&](int rank) {  // rank 2 of 3 never comes
    auto client = store.client("missing/");
    connect_mesh(*client, rank, 3,
                 options(TransportKind::kAuto, store.secret(), std::chrono::milliseconds(700)));
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]);
    EXPECT_THROW(std::rethrow_exception(errors[r]), TimeoutError);
    EXPECT_NE(what(errors[r]).find("ranks [2]"), std::string::npos) << what(errors[r]);
  }
}

class MeshWrongSecret : public ::testing::TestWithParam<TransportKind> {};

TEST_P(MeshWrongSecret, IsAnAuthError) {
  TestStore store;
  auto errors = run_ranks(2, [&](int rank) {
    auto client = store.client("secret/");
    MeshOptions o = options(GetParam(), store.secret(), std::chrono::seconds(1));
    if (rank == 1) o.secret = Secret::generate();
    connect_mesh(*client, rank, 2, o);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " connected despite a wrong secret";
    EXPECT_THROW(std::rethrow_exception(errors[r]), AuthError) << what(errors[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, MeshWrongSecret,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) { return std::string(kind_name(info.param)); });

// Ranks configured with different ring sizes: the acceptor refuses the connector's segment
// and both ranks fail with an error that names the mismatch, never a silent mesh.
TEST(Mesh, ShmRingSizeMismatchIsAnAuthErrorNamingIt) {
  TestStore store;
  auto errors = run_ranks(2, [&](int rank) {
    auto client = store.client("ring-size/");
    MeshOptions o = options(TransportKind::kShm, store.secret(), std::chrono::seconds(1));
    o.shm_ring_bytes = rank == 0 ? size_t{128} << 10 : size_t{64} << 10;
    connect_mesh(*client, rank, 2, o);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " connected despite different ring sizes";
    EXPECT_THROW(std::rethrow_exception(errors[r]), AuthError) << what(errors[r]);
    EXPECT_NE(what(errors[r]).find("ring size differs"), std::string::npos) << what(errors[r]);
  }
}

// Garbage, and an authenticated connection claiming another group, reach rank 1's listener
// while the mesh forms: both are dropped and the mesh still forms. Rank 1 closes its
// listener once rank 0 is in, so a stray that comes later is reset before it is heard;
// such attempts are repeated until the stray's claim has been answered at least once.
bool stray_attempt(TestStore& store, int attempt) {
  std::atomic<bool> answered{false};
  std::string prefix = "stray" + std::to_string(attempt) + "/";
  auto errors = run_ranks(3, [&](int rank) {
    auto client = store.client(prefix);
    if (rank == 2) {  // the stray
      auto fields = client->get("transport/addr/1", std::chrono::seconds(10));
      std::string addr = fields.substr(4, fields.find('\n') - 4);
      auto deadline = Deadline::after(std::chrono::seconds(5));
      try {
        net::Fd junk = net::connect_tcp(net::Endpoint::parse(addr), deadline);
        net::send_all(junk.get(), "GET / HTTP/1.0\r\n\r\n", 18, deadline, "junk");
        net::Fd liar = net::connect_tcp(net::Endpoint::parse(addr), deadline);
        rendezvous::authenticate_client(liar.get(), store.secret(), "peer", deadline);
        Hello h;
        h.kind = LinkKind::kTcp;
        h.from_rank = 0;
        h.to_rank = 1;
        h.size = 2;
        h.group = random_token();
        uint8_t wire[Hello::kWireBytes];
        h.encode(wire);
        net::send_all(liar.get(), wire, sizeof(wire), deadline, "hello");
        uint8_t reply[kReplyBytes];
        net::recv_all(liar.get(), reply, sizeof(reply), deadline, "reply");
        HelloStatus status;
        EXPECT_TRUE(decode_reply(reply, status));
        EXPECT_EQ(status, HelloStatus::kWrongGroup);
        answered = true;
      } catch (const IoError&) {
        // The mesh formed first and the listener is gone (connection reset): try again.
      } catch (const TimeoutError&) {
      }
      return;
    }
    auto mesh = connect_mesh(*client, rank, 2, options(TransportKind::kTcp, store.secret()));
    EXPECT_EQ(exchange_all_pairs(*mesh, 1000), 0);
  });
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(errors[r]) << "rank " << r << ": " << what(errors[r]);
  return answered;
}

TEST(Mesh, StrayConnectionsAreRejected) {
  TestStore store;
  bool answered = false;
  for (int attempt = 0; attempt < 20 && !answered; ++attempt)
    answered = stray_attempt(store, attempt);
  EXPECT_TRUE(answered) << "the stray never reached rank 1 while the mesh was forming";
}

TEST(Mesh, AbortWakesTheOtherRank) {
  TestStore store;
  for (TransportKind kind : {TransportKind::kTcp, TransportKind::kShm}) {
    auto errors = run_ranks(2, [&](int rank) {
      auto client = store.client(std::string("abort-") + kind_name(kind) + "/");
      auto mesh = connect_mesh(*client, rank, 2, options(kind, store.secret()));
      if (rank == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        mesh->abort({});
        return;
      }
      std::vector<char> buf(1 << 20);
      Transfer t = Transfer::recv(mesh->link(0), buf.data(), buf.size());
      auto start = Clock::now();
      EXPECT_THROW(Progress(Deadline::after(std::chrono::seconds(20)), "recv").finish(&t, 1),
                   IoError);
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
    });
    for (int r = 0; r < 2; ++r) EXPECT_FALSE(errors[r]) << what(errors[r]);
  }
}

// The error a 1 MiB receive from rank 0 throws on rank 1 (it must throw IoError).
std::string receive_error(Mesh& mesh) {
  std::vector<char> buf(1 << 20);
  Transfer t = Transfer::recv(mesh.link(0), buf.data(), buf.size());
  try {
    Progress(Deadline::after(std::chrono::seconds(20)), "recv").finish(&t, 1);
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "a receive from an aborted rank did not throw";
  return "";
}

// Two ranks over TCP with abort notes in `store`: rank 0 runs `aborting` 50 ms in, while
// rank 1 receives from it. Returns the error rank 1's receive threw.
std::string peer_error_after(TestStore& store, const std::string& prefix,
                             const std::function<void(Mesh&)>& aborting) {
  std::string seen;
  auto errors = run_ranks(2, [&](int rank) {
    auto client = store.client(prefix);
    auto mesh = connect_mesh(*client, rank, 2, options(TransportKind::kTcp, store.secret()));
    mesh->set_abort_notes(std::make_shared<AbortNotes>(*client, rank));
    if (rank == 1) {
      seen = receive_error(*mesh);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    aborting(*mesh);
  });
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(errors[r]) << what(errors[r]);
  EXPECT_NE(seen.find("connection closed by tcp to rank 0"), std::string::npos) << seen;
  return seen;
}

// TCP links carry no reason: the aborting rank leaves it in the store (AbortNotes), and its
// peer's error names it — printable ASCII only, at most 511 bytes, the first reason only.
TEST(Mesh, AbortReasonReachesATcpPeerThroughTheStore) {
  TestStore store;
  const std::string head = "rank 0: TimeoutError: timed out receiving from rank 7";
  std::string own;
  std::string seen = peer_error_after(store, "notes/", [&](Mesh& mesh) {
    mesh.abort(head + "\n\x01" + std::string(600, 'x'));
    mesh.abort("a later reason");
    char c;
    try {
      mesh.link(1).try_recv(&c, 1);
    } catch (const IoError& e) {
      own = e.what();
    }
  });
  std::string told = ": the peer aborted the link (" + head + "??" +
                     std::string(kAbortReasonMax - head.size() - 2, 'x') + ")";
  EXPECT_NE(seen.find(told), std::string::npos) << seen;
  EXPECT_EQ(seen.find("a later reason"), std::string::npos) << seen;
  EXPECT_NE(own.find("after this rank aborted the link"), std::string::npos) << own;
  EXPECT_EQ(own.find("the peer aborted"), std::string::npos) << own;
}

// A rank that breaks its links without a reason (or dies) leaves no note: its peer waits
// for one briefly, then fails with the closed connection alone.
TEST(Mesh, AbortWithoutAReasonLeavesTheTcpPeerNone) {
  TestStore store;
  std::string seen = peer_error_after(store, "no-note/", [](Mesh& mesh) { mesh.abort({}); });
  EXPECT_EQ(seen.find("the peer aborted"), std::string::npos) << seen;
}

TEST(AbortNotes, ShowOnlyPrintableAsciiUpToTheLimit) {
  EXPECT_EQ(printable_reason("ok: \t\x7f\xc3\xa9!"), "ok: ?\?\?\?!");
  EXPECT_EQ(printable_reason(std::string(600, 'y')), std::string(kAbortReasonMax, 'y'));
  EXPECT_EQ(printable_reason(""), "");
}

}  // namespace
}  // namespace chorus::transport
