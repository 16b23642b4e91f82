#include "transport/abort_notes.h"

namespace chorus::transport {
namespace {

std::string note_key(int rank) { return "transport/abort/" + std::to_string(rank); }

}  // namespace

std::string printable_reason(std::string_view text) {
  std::string out(text.substr(0, kAbortReasonMax));
  for (char& c : out) {
    if (c < 0x20 || c >= 0x7f) c = '?';
  }
  return out;
}

void AbortNotes::publish(std::string_view reason) noexcept {
  if (reason.empty() || published_.exchange(true)) return;
  try {
    store_.set(note_key(rank_), std::string(reason.substr(0, kAbortReasonMax)));
  } catch (...) {  // the store is gone or refuses: the peers see the link close, no more
  }
}

std::string AbortNotes::peer_reason(int peer) noexcept {
  try {
    return printable_reason(store_.get(note_key(peer), kWait));
  } catch (...) {  // no note in time, or no store
    return "";
  }
}

}  // namespace chorus::transport
