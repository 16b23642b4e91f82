#include "comm/placement.h"

#include <algorithm>
#include <cstdint>

#include "transport/progress.h"

namespace chorus::comm {

using transport::Transfer;

bool PlacementChooser::next_far() {
  retrying_ = false;
  if (runs_[0] < 2 || runs_[1] < 2) return last_far_ = runs_[1] < runs_[0];
  bool far = faster_far();
  if (++since_retry_ >= retry_every_) {
    since_retry_ = 0;
    retrying_ = true;
    far = !far;
  }
  return last_far_ = far;
}

void PlacementChooser::ran(size_t bytes, std::chrono::nanoseconds took) {
  if (bytes == 0) return;
  int mode = last_far_ ? 1 : 0;
  if (++runs_[mode] == 1) return;  // the warm-up
  bool was_faster_far = faster_far();
  double now = static_cast<double>(took.count()) / static_cast<double>(bytes);
  double& recent = ns_per_byte_[mode];
  // Half the weight on the newest call: a chosen mode that turned slow loses within a call
  // or two. A retry's mode was not run for a while: what it had is stale.
  recent = runs_[mode] == 2 || retrying_ ? now : (recent + now) / 2;
  if (!retrying_) return;
  if (faster_far() == was_faster_far) {
    retry_every_ = std::min(2 * retry_every_, kMaxRetryEvery);
  } else {
    retry_every_ = kFirstRetryEvery;
  }
}

bool agree_far(Context& ctx, PlacementChooser& chooser) {
  // 8 bytes keep the link's byte stream 8-aligned (comm/recv_reduce.h).
  uint64_t far = ctx.rank() == 0 ? (chooser.next_far() ? 1 : 0) : 0;
  transport::Link& link = ctx.link(1 - ctx.rank());
  Transfer t = ctx.rank() == 0 ? Transfer::send(link, &far, sizeof(far))
                               : Transfer::recv(link, &far, sizeof(far));
  ctx.progress.finish(&t, 1);
  return far == 1;
}

}  // namespace chorus::comm
