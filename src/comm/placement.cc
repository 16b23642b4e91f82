#include "comm/placement.h"

#include <algorithm>
#include <chrono>

#include "transport/progress.h"

namespace chorus::comm {

using transport::Transfer;

int64_t pair_round_trip_ns(Context& ctx) {
  transport::Link& link = ctx.link(1 - ctx.rank());
  const bool timer = ctx.rank() == 0;  // rank 0 sends first and times; rank 1 echoes
  // 8-byte tokens keep the link's byte stream 8-aligned (comm/recv_reduce.h).
  uint64_t token = 0;
  auto step = [&](bool send) {
    Transfer t = send ? Transfer::send(link, &token, sizeof(token))
                      : Transfer::recv(link, &token, sizeof(token));
    ctx.progress.finish(&t, 1);
  };
  using Clock = std::chrono::steady_clock;
  Clock::duration fastest = Clock::duration::max();
  for (int i = 0; i < kPlacementRoundTrips; ++i) {
    Clock::time_point start = Clock::now();
    step(timer);
    step(!timer);
    if (timer) fastest = std::min(fastest, Clock::now() - start);
  }
  // Rank 0's measure is the answer for both.
  token =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(fastest).count());
  step(timer);
  return static_cast<int64_t>(token);
}

}  // namespace chorus::comm
