// Where the host put the cores of two ranks on one host (docs/algorithms.md, "Two
// placements"): near ones share a cache; far ones hand every cache line across several
// times slower, which the streaming ring pays on every byte unless it passes them through
// memory (RingMode::kStreamingFar), which in turn costs near cores.
#pragma once

#include <cstdint>

#include "comm/context.h"

namespace chorus::comm {

// The fastest of kPlacementRoundTrips 8-byte round trips over the two ranks' link, in
// nanoseconds, as rank 0 measured it: both ranks return it, so they plan alike. From
// kFarRoundTripNs the cores are far apart: on the AMD EPYC VM, 130-150 ns near and 340-370
// ns far. Collective. REQUIRES: ctx.size() == 2.
inline constexpr int kPlacementRoundTrips = 16;
inline constexpr int64_t kFarRoundTripNs = 300;
int64_t pair_round_trip_ns(Context& ctx);

}  // namespace chorus::comm
