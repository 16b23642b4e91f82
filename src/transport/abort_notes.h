// Abort reasons for links that cannot carry one (TCP: a byte stream has no room for a note
// its reader would not take for data). A rank whose collective fails first aborts its links,
// so that its peers stop waiting at once, then leaves its error in the store its
// communicator was built through; a peer whose TCP link to it then closes waits briefly for
// that note and adds it to its own error. A cascade across hosts then names the first
// failure (a timeout toward a third rank, a mismatched call), as the shared-memory segment's
// abort_reason does on one host, instead of only "connection closed". docs/wire_format.md.
//
// Thread safety: publish() and peer_reason() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>

#include "chorus/store.h"

namespace chorus::transport {

// A reason as a peer may show it: printable ASCII kept, any other byte shown as '?', and
// at most kAbortReasonMax bytes, whatever the sender wrote.
inline constexpr size_t kAbortReasonMax = 511;
std::string printable_reason(std::string_view text);

class AbortNotes {
 public:
  // How long a peer waits for a note after its link closed: the note is written right
  // after the links are aborted, one store round trip later. A peer that died without
  // one (killed) costs its survivors this much more before they fail.
  static constexpr std::chrono::milliseconds kWait{250};

  // `store` must outlive this (a communicator's store outlives the communicator).
  AbortNotes(Store& store, int rank) : store_(store), rank_(rank) {}

  // Leaves this rank's reason under transport/abort/<rank>, the first non-empty one only.
  // Never throws: a store that fails or is gone leaves no note (the abort itself happened
  // already). Takes at most one store call, bounded by the store client's timeout.
  void publish(std::string_view reason) noexcept;
  // The note `peer` left (printable_reason), waiting up to kWait for it; "" when none came.
  std::string peer_reason(int peer) noexcept;

 private:
  Store& store_;
  const int rank_;
  std::atomic<bool> published_{false};
};

}  // namespace chorus::transport
