#include "comm/allreduce_plan.h"

namespace chorus::comm {
namespace {

bool ring_family(AllreduceAlgorithm requested) {
  return requested == AllreduceAlgorithm::kAuto || requested == AllreduceAlgorithm::kRing;
}

bool streams(const AllreduceFacts& f, const CommunicatorOptions& o) {
  return o.shm_streaming_bytes > 0 && f.bytes >= o.shm_streaming_bytes && f.one_host && f.shm_links;
}

bool reads_peers(const AllreduceFacts& f, const CommunicatorOptions& o) {
  return o.shm_single_copy && f.bytes >= kSingleCopyMinBytes && f.one_host && f.shm_links &&
         f.peers_readable && f.peers_readable();
}

AllreducePlan by_size(const AllreduceFacts& f, AllreduceAlgorithm requested) {
  switch (requested) {
    case AllreduceAlgorithm::kRing:
      return {AllreducePath::kRing, "CHORUS_ALLREDUCE_ALGO=ring"};
    case AllreduceAlgorithm::kHalvingDoubling:
      return {AllreducePath::kHalvingDoubling, "CHORUS_ALLREDUCE_ALGO=halving_doubling"};
    case AllreduceAlgorithm::kRecursiveDoubling:
      return {AllreducePath::kRecursiveDoubling, "CHORUS_ALLREDUCE_ALGO=recursive_doubling"};
    case AllreduceAlgorithm::kAuto:
      break;
  }
  return plan_by_size(f.bytes, f.size, !f.shm_links);
}

}  // namespace

const char* allreduce_path_name(AllreducePath path) {
  switch (path) {
    case AllreducePath::kLocal:
      return "local";
    case AllreducePath::kSharedMemory:
      return "shared memory";
    case AllreducePath::kDirectSingleCopy:
      return "direct (single-copy)";
    case AllreducePath::kRingStreaming:
      return "ring (streaming)";
    case AllreducePath::kRingStreamingFar:
      return "ring (streaming, far)";
    case AllreducePath::kRingSingleCopy:
      return "ring (single-copy)";
    case AllreducePath::kRing:
      return "ring";
    case AllreducePath::kHalvingDoubling:
      return "halving-doubling";
    case AllreducePath::kRecursiveDoubling:
      return "recursive doubling";
    case AllreducePath::kHierarchical:
      return "hierarchical";
  }
  return "unknown";
}

AllreducePlan plan_by_size(size_t bytes, int size, bool sockets) {
  if (size == 3) return {AllreducePath::kRing, "3 ranks: no power-of-two core to halve"};
  if (bytes <= kRecursiveDoublingMaxBytes) {
    return {AllreducePath::kRecursiveDoubling, "at most 16 KiB: latency-bound"};
  }
  if (size == 2 && sockets && bytes <= kPairExchangeMaxBytes) {
    return {AllreducePath::kRecursiveDoubling, "2 ranks over sockets, at most 1 MiB: one exchange"};
  }
  if (size == 2 && sockets && bytes <= kPairHalvingMaxBytes) {
    return {AllreducePath::kHalvingDoubling, "2 ranks over sockets, at most 16 MiB: two messages"};
  }
  if (bytes <= kHalvingDoublingMaxBytes) {
    return {AllreducePath::kHalvingDoubling, "at most 4 MiB: fewer steps than the ring"};
  }
  return {AllreducePath::kRing, "over 4 MiB: bandwidth-bound"};
}

AllreducePlan plan_allreduce(const AllreduceFacts& f, const CommunicatorOptions& o) {
  if (f.size == 1) return {AllreducePath::kLocal, "one rank"};
  // The handshake also compares the ranks' calls, so it comes first whenever it may apply.
  if (!f.parts && f.has_shared && f.bytes >= kSharedMinBytes && f.shared_buffers &&
      f.shared_buffers()) {
    return {AllreducePath::kSharedMemory, "every rank's buffers are in alloc_shared memory"};
  }
  if (f.uniform_hosts && o.hierarchical_allreduce == 1) {
    return {AllreducePath::kHierarchical, "CHORUS_HIERARCHICAL_ALLREDUCE=1"};
  }
  if (f.uniform_hosts && o.hierarchical_allreduce < 0 &&
      o.allreduce_algorithm == AllreduceAlgorithm::kAuto && f.bytes >= kHierarchicalMinBytes) {
    return {AllreducePath::kHierarchical,
            "several hosts with as many ranks each, from 1 MiB: one stream per local rank"};
  }
  // Where ranks may read and write each other's memory, reducing each part once straight
  // from and into every rank's buffers moves the fewest bytes and never waits mid-call;
  // only a large call out of place streams faster, its outputs written past the cache
  // (docs/algorithms.md, "Direct").
  if (o.allreduce_algorithm == AllreduceAlgorithm::kAuto && reads_peers(f, o) &&
      (f.parts || !streams(f, o) || (f.in_place && f.in_place()))) {
    return {AllreducePath::kDirectSingleCopy,
            "from 1 MiB where every rank may read and write its peers' memory"};
  }
  if (ring_family(o.allreduce_algorithm)) {
    // Parts the single-copy ring reads where they lie stay there at any size: staging them
    // through one buffer to stream costs two copies, more than streaming gains (the
    // engine's in-place groups; docs/engine.md, "Fusion").
    if (f.parts && reads_peers(f, o)) {
      return {AllreducePath::kRingSingleCopy, "parts where they lie, which every rank may read"};
    }
    if (streams(f, o)) {
      // Far cores hand each line the streaming ring passes across slowly; through memory it
      // goes faster (docs/algorithms.md, "Two placements"; comm/placement.h).
      if (f.cores_far && f.cores_far()) {
        return {AllreducePath::kRingStreamingFar,
                "through memory, as for cores far apart (CHORUS_SHM_PLACEMENT)"};
      }
      return {AllreducePath::kRingStreaming,
              "over shared memory from CHORUS_SHM_STREAMING_BYTES: past the cache"};
    }
    if (reads_peers(f, o)) {
      return {AllreducePath::kRingSingleCopy,
              "from 1 MiB where every rank may read its peers' memory"};
    }
  }
  return by_size(f, o.allreduce_algorithm);
}

const char* ring_mode_name(RingMode mode) {
  switch (mode) {
    case RingMode::kStream:
      return "ring";
    case RingMode::kStreaming:
      return "ring (streaming)";
    case RingMode::kStreamingFar:
      return "ring (streaming, far)";
    case RingMode::kSingleCopy:
      return "ring (single-copy)";
  }
  return "unknown";
}

RingMode plan_ring(size_t bytes, const CommunicatorOptions& options,
                   const std::function<bool()>& peers_readable) {
  bool single =
      options.shm_single_copy && bytes >= kSingleCopyMinBytes && peers_readable && peers_readable();
  return single ? RingMode::kSingleCopy : RingMode::kStream;
}

}  // namespace chorus::comm
