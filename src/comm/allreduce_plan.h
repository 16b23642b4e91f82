// How a collective runs, decided in one place from what every rank knows alike, so that
// every rank runs the same path: plan_allreduce() for allreduce (single buffer or parts),
// plan_ring() for the ring allgather and reduce-scatter. The communicator gathers the facts
// and runs the plan (communicator.cc); nothing else chooses an algorithm.
//
// Facts that cost a collective to learn (whether every rank may read its peers' memory,
// whether every rank's buffers lie in shared memory) are asked lazily, only when the plan
// needs them; every rank needs them at the same point, so the collectives match.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "chorus/communicator.h"

namespace chorus::comm {

enum class AllreducePath : uint8_t {
  kLocal,              // one rank: a copy
  kSharedMemory,       // every rank's buffers in alloc_shared memory: reduced there, no link
  kDirectSingleCopy,   // each rank reduces its part from every rank's memory into every rank's
  kRingStreaming,      // the byte-stream ring, chunk-major, results written past the cache
  kRingStreamingFar,   // the same on cores far apart: the rings' bytes pass through memory
  kRingSingleCopy,     // the ring that reads peers' memory (PeerMemory), parts in place
  kRing,               // the byte-stream ring (parts: staged through one buffer)
  kHalvingDoubling,    // Rabenseifner (parts: staged)
  kRecursiveDoubling,  // lg p exchanges of the whole buffer (parts: staged)
  kHierarchical,       // within hosts, then across, then within (parts: staged)
};

// "local", "shared memory", "direct (single-copy)", "ring (streaming)", "ring (streaming, far)",
// "ring (single-copy)", "ring", "halving-doubling", "recursive doubling", "hierarchical".
const char* allreduce_path_name(AllreducePath path);

struct AllreducePlan {
  AllreducePath path = AllreducePath::kRing;
  const char* why = "";  // one line: the rule that chose it
};

// What an allreduce plan depends on; each the same on every rank.
struct AllreduceFacts {
  size_t bytes = 0;         // of the whole call
  bool parts = false;       // several buffers (Communicator::allreduce over parts)
  int size = 1;             // ranks
  bool one_host = false;    // every rank on this host
  bool shm_links = false;   // ... and linked through shared memory (not CHORUS_TRANSPORT=tcp)
  bool has_shared = false;  // some alloc_shared memory is shared (every rank alike)
  // Several hosts with the same number (> 1) of ranks each: the hierarchical allreduce applies.
  bool uniform_hosts = false;
  // Collective, asked only when needed: every rank may read every peer's memory.
  std::function<bool()> peers_readable;
  // Collective, asked only when needed: every rank's send and recv lie in alloc_shared
  // memory (the shared-memory handshake, which also checks that the calls agree).
  std::function<bool()> shared_buffers;
  // Asked only when needed (ranks about to stream): stream as for cores far apart
  // (CommunicatorOptions::shm_placement; auto: for 2 ranks rank 0's choice from how fast
  // each mode ran lately, collectively; more count as near: comm/placement.h).
  std::function<bool()> cores_far;
  // Collective, asked only when needed: every rank's send is its recv (in place).
  std::function<bool()> in_place;
};

// The smallest allreduce worth the shared-memory handshake (about a microsecond): smaller
// calls take the usual path (docs/benchmarks.md).
inline constexpr size_t kSharedMinBytes = size_t{4} << 10;
// Ring calls of at least this many bytes (the whole buffer) read peers' memory directly
// when every rank may (CommunicatorOptions::shm_single_copy).
inline constexpr size_t kSingleCopyMinBytes = size_t{1} << 20;
// kAuto's crossovers (bytes per rank's buffer), measured on loopback TCP: docs/algorithms.md.
inline constexpr size_t kRecursiveDoublingMaxBytes = size_t{16} << 10;
inline constexpr size_t kHalvingDoublingMaxBytes = size_t{4} << 20;
// Two ranks over sockets exchange whole buffers (recursive doubling) up to this size: the
// same bytes as halving-doubling in one step and in larger sends.
inline constexpr size_t kPairExchangeMaxBytes = size_t{1} << 20;
// Two ranks over sockets keep halving-doubling (two exchanges of halves, each one message)
// up to this size, where the ring's pipelined units were slower: 8-16 MiB by 1.05-1.37x in
// every trial on an Intel Xeon VM, even at 32 MiB (docs/algorithms.md).
inline constexpr size_t kPairHalvingMaxBytes = size_t{16} << 20;
// Where hosts are uniform, CHORUS_HIERARCHICAL_ALLREDUCE=auto runs the hierarchical
// allreduce from this size (measured in network namespaces: docs/benchmarks.md).
inline constexpr size_t kHierarchicalMinBytes = size_t{1} << 20;

AllreducePlan plan_allreduce(const AllreduceFacts& facts, const CommunicatorOptions& options);
// kAuto's choice among the ring, halving-doubling and recursive doubling for an allreduce of
// `bytes` among `size` ranks; `sockets`: linked by sockets, not shared memory. Also the
// hierarchical allreduce's choice for its step across hosts.
AllreducePlan plan_by_size(size_t bytes, int size, bool sockets);

// How a ring allgather / reduce-scatter of `bytes` runs.
enum class RingMode : uint8_t {
  kStream,     // through the links' byte streams
  kStreaming,  // chunk-major through shared-memory rings, results past the cache
  // kStreaming for cores far apart: what goes into the rings also bypasses the cache, so
  // the neighbour reads it from memory, not line by line from this core's distant cache.
  kStreamingFar,
  kSingleCopy,  // reading peers' memory
};
const char* ring_mode_name(RingMode mode);
// Single copy from kSingleCopyMinBytes when allowed and every rank may read its peers'
// memory (asked lazily, as above); the byte stream otherwise.
RingMode plan_ring(size_t bytes, const CommunicatorOptions& options,
                   const std::function<bool()>& peers_readable);

}  // namespace chorus::comm
