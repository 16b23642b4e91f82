// Where the host put the cores of two ranks on one host (docs/algorithms.md, "Two
// placements"): near ones hand cache lines to each other quickly; far ones hand every line
// across several times slower, which the streaming ring pays on every byte unless it passes
// them through memory (RingMode::kStreamingFar), which in turn costs near cores.
//
// No probe tells the two apart on every host: an 8-byte round trip of 340-370 ns meant far
// cores on an AMD EPYC VM (near: 130-150 ns), while on an Intel Xeon VM it is 800-900 ns and
// cache to cache is still the faster way. So the streaming calls themselves are the probe:
// rank 0 times each in the mode it ran, runs the mode that was faster lately, and now and
// then the other again, since the host moves the cores while a job runs.
#pragma once

#include <chrono>
#include <cstddef>

#include "comm/context.h"

namespace chorus::comm {

// Rank 0's choice between near and far streaming. Not thread-safe: the collectives' thread.
class PlacementChooser {
 public:
  // The other mode is tried again after this many calls in the faster one; the interval
  // doubles, up to kMaxRetryEvery, each time the retry confirms the choice.
  static constexpr unsigned kFirstRetryEvery = 8;
  static constexpr unsigned kMaxRetryEvery = 64;

  // Whether the next call runs far: each mode twice first (near, far, near, far), then the
  // faster lately, or the other when a retry is due.
  bool next_far();
  // How long the call next_far() chose last took, for `bytes`. A mode's first call warms its
  // memory up and is not counted; a retry's time replaces what its mode had.
  void ran(size_t bytes, std::chrono::nanoseconds took);

 private:
  bool faster_far() const { return ns_per_byte_[1] < ns_per_byte_[0]; }

  double ns_per_byte_[2] = {0, 0};  // recent time per byte, near and far
  unsigned runs_[2] = {0, 0};       // calls run in each mode
  bool last_far_ = false;
  bool retrying_ = false;  // the last call ran the slower mode to look at it again
  unsigned since_retry_ = 0;
  unsigned retry_every_ = kFirstRetryEvery;
};

// Collective (2 ranks): rank 0 asks `chooser` and sends the answer to rank 1, so both run the
// same mode. Rank 1's chooser is not used.
bool agree_far(Context& ctx, PlacementChooser& chooser);

}  // namespace chorus::comm
