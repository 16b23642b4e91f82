// Where the host put the two ranks' cores (docs/algorithms.md, "Two placements"): near
// ones share a cache; far ones hand every cache line across several times slower, which
// the streaming ring pays on every byte and the single-copy ring, reading from memory, not.
#include <algorithm>
#include <chrono>
#include <cstdint>

#include "comm/ring.h"
#include "transport/progress.h"

namespace chorus::comm {

using transport::Transfer;

int64_t pair_round_trip_ns(Context& ctx) {
  transport::Link& link = ctx.link(1 - ctx.rank());
  // 8-byte tokens keep the link's byte stream 8-aligned (comm/recv_reduce.h).
  uint64_t token = 0;
  auto step = [&](bool send) {
    Transfer t = send ? Transfer::send(link, &token, sizeof(token))
                      : Transfer::recv(link, &token, sizeof(token));
    ctx.progress.finish(&t, 1);
  };
  int64_t fastest = INT64_MAX;
  for (int i = 0; i < kPlacementRoundTrips; ++i) {
    auto start = std::chrono::steady_clock::now();
    step(ctx.rank() == 0);
    step(ctx.rank() != 0);
    auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - start);
    fastest = std::min<int64_t>(fastest, took.count());
  }
  // Rank 0's measure is the answer: both ranks must plan alike.
  token = static_cast<uint64_t>(fastest);
  step(ctx.rank() == 0);
  return static_cast<int64_t>(token);
}

}  // namespace chorus::comm
