// The one allreduce plan: every rule with its facts, and the collective facts asked only
// where a rule needs them (each ask is a collective every rank must make alike).
#include "comm/allreduce_plan.h"

#include <gtest/gtest.h>

namespace chorus::comm {
namespace {

using P = AllreducePath;

struct Asked {
  int readable = 0, shared = 0, far = 0;
};

// Facts of a single-host job of `size` ranks over shared memory; the collective facts
// answer `readable` / `shared` and count how often they are asked.
AllreduceFacts facts(size_t bytes, int size, Asked& asked, bool readable = true, bool shared = true,
                     bool far = false) {
  AllreduceFacts f;
  f.bytes = bytes;
  f.size = size;
  f.one_host = f.shm_links = true;
  f.peers_readable = [&asked, readable] { return ++asked.readable, readable; };
  f.shared_buffers = [&asked, shared] { return ++asked.shared, shared; };
  f.cores_far = [&asked, far] { return ++asked.far, far; };
  return f;
}

TEST(AllreducePlan, SharedMemoryFirstWhenEveryRanksBuffersAreShared) {
  CommunicatorOptions o;
  Asked asked;
  auto f = facts(kSharedMinBytes, 2, asked);
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRecursiveDoubling);  // no shared allocation yet
  EXPECT_EQ(asked.shared, 0);
  f.has_shared = true;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kSharedMemory);
  EXPECT_EQ(asked.shared, 1);
  f.bytes = kSharedMinBytes - 1;  // below the handshake's worth: not asked
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRecursiveDoubling);
  f.bytes = 64 << 20;
  f.parts = true;  // parts never go through shared memory
  EXPECT_EQ(plan_allreduce(f, o).path, P::kDirectSingleCopy);
  EXPECT_EQ(asked.shared, 1);
  auto heap = facts(64 << 20, 2, asked, true, /*shared=*/false);
  heap.has_shared = true;
  EXPECT_EQ(plan_allreduce(heap, o).path, P::kRingStreaming);  // asked, then the usual plan
  EXPECT_EQ(asked.shared, 2);
}

// Asked for the ring: the streaming ring from the streaming size, the single-copy ring
// from 1 MiB.
TEST(AllreducePlan, StreamingThenSingleCopyOverSharedMemory) {
  CommunicatorOptions o;
  o.allreduce_algorithm = AllreduceAlgorithm::kRing;
  Asked asked;
  EXPECT_EQ(plan_allreduce(facts(o.shm_streaming_bytes, 2, asked), o).path, P::kRingStreaming);
  EXPECT_EQ(asked.readable, 0);
  EXPECT_EQ(plan_allreduce(facts(kSingleCopyMinBytes, 2, asked), o).path, P::kRingSingleCopy);
  EXPECT_EQ(asked.readable, 1);
  EXPECT_EQ(plan_allreduce(facts(kSingleCopyMinBytes, 2, asked, false), o).path, P::kRing);
  EXPECT_EQ(plan_allreduce(facts(kSingleCopyMinBytes - 1, 2, asked), o).path, P::kRing);
  EXPECT_EQ(asked.readable, 2);  // not asked below 1 MiB
  // Parts stay where they lie whenever they may be read: streaming would stage them.
  auto parts = facts(o.shm_streaming_bytes, 2, asked);
  parts.parts = true;
  EXPECT_EQ(plan_allreduce(parts, o).path, P::kRingSingleCopy);
  EXPECT_EQ(asked.readable, 3);
  EXPECT_EQ(plan_allreduce(facts(o.shm_streaming_bytes, 2, asked, false), o).path,
            P::kRingStreaming);
  parts = facts(o.shm_streaming_bytes, 2, asked, /*readable=*/false);
  parts.parts = true;
  EXPECT_EQ(plan_allreduce(parts, o).path, P::kRingStreaming);  // staged, as before
  // Streaming off: single copy takes it.
  o.shm_streaming_bytes = 0;
  EXPECT_EQ(plan_allreduce(facts(64 << 20, 2, asked), o).path, P::kRingSingleCopy);
  o.shm_single_copy = false;
  EXPECT_EQ(plan_allreduce(facts(64 << 20, 2, asked), o).path, P::kRing);
}

// By default, where every rank may read (and so write) its peers' memory, from 1 MiB: the
// direct allreduce for parts and below the streaming size; from the streaming size only in
// place, which is asked only there (out of place, streaming writes its outputs faster).
TEST(AllreducePlan, DirectWhereRanksMayReadAndWriteEachOther) {
  CommunicatorOptions o;
  Asked asked;
  int asked_in_place = 0;
  auto with = [&](size_t bytes, bool in_place, bool readable = true) {
    AllreduceFacts f = facts(bytes, 3, asked, readable, false);
    f.in_place = [&asked_in_place, in_place] { return ++asked_in_place, in_place; };
    return plan_allreduce(f, o).path;
  };
  EXPECT_EQ(with(kSingleCopyMinBytes - 1, true), P::kRing);  // 3 ranks, below 1 MiB
  EXPECT_EQ(asked.readable, 0);
  EXPECT_EQ(with(kSingleCopyMinBytes, false), P::kDirectSingleCopy);
  EXPECT_EQ(with(o.shm_streaming_bytes - 1, false), P::kDirectSingleCopy);
  EXPECT_EQ(asked_in_place, 0);
  EXPECT_EQ(with(o.shm_streaming_bytes, true), P::kDirectSingleCopy);
  EXPECT_EQ(with(o.shm_streaming_bytes, false), P::kRingStreaming);
  EXPECT_EQ(asked_in_place, 2);
  EXPECT_EQ(with(o.shm_streaming_bytes, true, /*readable=*/false), P::kRingStreaming);
  EXPECT_EQ(asked_in_place, 2);  // nothing to ask where the peers cannot be read
  auto parts = facts(o.shm_streaming_bytes, 2, asked);
  parts.parts = true;
  EXPECT_EQ(plan_allreduce(parts, o).path, P::kDirectSingleCopy);
  // Not where single copy is off, nor over sockets, nor when another algorithm is asked for.
  o.shm_single_copy = false;
  EXPECT_EQ(with(4 << 20, true), P::kRing);
  o.shm_single_copy = true;
  AllreduceFacts tcp = facts(4 << 20, 2, asked);
  tcp.shm_links = false;
  EXPECT_EQ(plan_allreduce(tcp, o).path, P::kHalvingDoubling);
  o.allreduce_algorithm = AllreduceAlgorithm::kHalvingDoubling;
  EXPECT_EQ(with(4 << 20, true), P::kHalvingDoubling);
  EXPECT_STREQ(allreduce_path_name(P::kDirectSingleCopy), "direct (single-copy)");
}

// Ranks whose cores are far apart stream through memory rather than hand every line across
// caches; asked only where they would stream.
TEST(AllreducePlan, FarCoresStreamThroughMemoryWhereRanksWouldStream) {
  CommunicatorOptions o;
  Asked asked;
  const size_t big = o.shm_streaming_bytes;
  EXPECT_EQ(plan_allreduce(facts(big, 2, asked, true, true, /*far=*/true), o).path,
            P::kRingStreamingFar);
  EXPECT_EQ(asked.far, 1);
  EXPECT_EQ(plan_allreduce(facts(big, 2, asked, true, true, /*far=*/false), o).path,
            P::kRingStreaming);
  EXPECT_EQ(asked.far, 2);
  // Whether peers' memory is readable does not matter to it.
  EXPECT_EQ(plan_allreduce(facts(big, 2, asked, /*readable=*/false, true, true), o).path,
            P::kRingStreamingFar);
  EXPECT_EQ(asked.far, 3);
  // Any number of ranks (the communicator chooses for 2 only and takes more as near).
  EXPECT_EQ(plan_allreduce(facts(big, 3, asked, true, true, true), o).path, P::kRingStreamingFar);
  EXPECT_EQ(plan_allreduce(facts(big, 4, asked, true, true, false), o).path, P::kRingStreaming);
  EXPECT_EQ(asked.far, 5);
  // Not asked: below the streaming size, TCP.
  EXPECT_EQ(plan_allreduce(facts(big - 1, 2, asked, true, true, true), o).path,
            P::kDirectSingleCopy);
  auto tcp = facts(big, 2, asked, true, true, true);
  tcp.shm_links = false;
  EXPECT_EQ(plan_allreduce(tcp, o).path, P::kHalvingDoubling);  // 2 ranks over sockets
  EXPECT_EQ(asked.far, 5);
  EXPECT_STREQ(allreduce_path_name(P::kRingStreamingFar), "ring (streaming, far)");
}

TEST(AllreducePlan, TcpOrSeveralHostsPlanBySizeWithoutAsking) {
  CommunicatorOptions o;
  Asked asked;
  auto f = facts(64 << 20, 4, asked);
  f.shm_links = false;  // CHORUS_TRANSPORT=tcp
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRing);
  f.one_host = false;
  f.bytes = 8;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRecursiveDoubling);
  f.bytes = kRecursiveDoublingMaxBytes + 1;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kHalvingDoubling);
  f.bytes = kHalvingDoublingMaxBytes;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kHalvingDoubling);
  f.bytes = kHalvingDoublingMaxBytes + 1;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRing);
  f.size = 3;
  f.bytes = 8;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRing);
  EXPECT_EQ(asked.readable, 0);
}

// Two ranks over sockets exchange whole buffers up to 1 MiB and halves up to 16 MiB, then
// take the ring; over shared memory, or with more ranks, halving-doubling keeps sizes up to
// 4 MiB.
TEST(AllreducePlan, TwoRanksOverSocketsExchangeWholeBuffersUpTo1MiB) {
  CommunicatorOptions o;
  Asked asked;
  auto f = facts(kPairExchangeMaxBytes, 2, asked);
  f.shm_links = false;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRecursiveDoubling);
  f.bytes = kRecursiveDoublingMaxBytes + 1;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRecursiveDoubling);
  f.bytes = kPairExchangeMaxBytes + 1;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kHalvingDoubling);
  f.bytes = kPairHalvingMaxBytes;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kHalvingDoubling);
  f.bytes = kPairHalvingMaxBytes + 1;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRing);
  f.size = 4;
  f.bytes = kHalvingDoublingMaxBytes + 1;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRing);
  f.bytes = kPairExchangeMaxBytes;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kHalvingDoubling);
  o.shm_single_copy = false;
  EXPECT_EQ(plan_allreduce(facts(kPairExchangeMaxBytes, 2, asked), o).path, P::kHalvingDoubling);
}

TEST(AllreducePlan, HierarchicalFrom1MiBOnUniformHostsUnlessAnotherIsAsked) {
  CommunicatorOptions o;
  Asked asked;
  auto f = facts(kHierarchicalMinBytes, 4, asked);
  f.one_host = f.shm_links = false;
  f.uniform_hosts = true;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kHierarchical);
  f.bytes = kHierarchicalMinBytes - 1;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kHalvingDoubling);
  o.hierarchical_allreduce = 1;  // always, whatever the size
  EXPECT_EQ(plan_allreduce(f, o).path, P::kHierarchical);
  f.bytes = 64 << 20;
  o.hierarchical_allreduce = 0;  // never
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRing);
  o.hierarchical_allreduce = -1;
  o.allreduce_algorithm = AllreduceAlgorithm::kRing;  // a named algorithm is the flat one
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRing);
  o.allreduce_algorithm = AllreduceAlgorithm::kAuto;
  f.uniform_hosts = false;  // uneven hosts: flat
  o.hierarchical_allreduce = 1;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRing);
  EXPECT_EQ(asked.readable, 0);
}

TEST(AllreducePlan, AChosenAlgorithmWinsOverSizeButNotOverSharedMemory) {
  CommunicatorOptions o;
  Asked asked;
  o.allreduce_algorithm = AllreduceAlgorithm::kRecursiveDoubling;
  auto f = facts(64 << 20, 3, asked);
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRecursiveDoubling);  // no streaming, no single copy
  EXPECT_EQ(asked.readable, 0);
  f.has_shared = true;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kSharedMemory);
  o.allreduce_algorithm = AllreduceAlgorithm::kRing;  // the ring family keeps its modes
  f.has_shared = false;
  EXPECT_EQ(plan_allreduce(f, o).path, P::kRingStreaming);
  EXPECT_EQ(plan_allreduce(facts(8, 1, asked), o).path, P::kLocal);
}

TEST(AllreducePlan, EveryPlanHasANameAndAReason) {
  CommunicatorOptions o;
  Asked asked;
  for (size_t bytes : {size_t{8}, size_t{1} << 20, size_t{64} << 20}) {
    AllreducePlan p = plan_allreduce(facts(bytes, 2, asked), o);
    EXPECT_STRNE(allreduce_path_name(p.path), "unknown");
    EXPECT_GT(std::string(p.why).size(), 5u);
  }
  EXPECT_EQ(plan_ring(kSingleCopyMinBytes, o, [] { return true; }), RingMode::kSingleCopy);
  EXPECT_EQ(plan_ring(kSingleCopyMinBytes - 1, o, [] { return true; }), RingMode::kStream);
  EXPECT_EQ(plan_ring(kSingleCopyMinBytes, o, [] { return false; }), RingMode::kStream);
  EXPECT_STREQ(ring_mode_name(RingMode::kSingleCopy), "ring (single-copy)");
}

}  // namespace
}  // namespace chorus::comm
