#include "engine/message_table.h"

namespace chorus::engine {

void MessageTable::add(int rank, Request request, Clock::time_point now) {
  auto it = entries_.find(request.name);
  if (it == entries_.end()) {
    Entry e;
    e.per_rank.resize(size_);
    e.first_seen = now;
    e.seq = next_seq_++;
    order_.emplace(e.seq, request.name);
    it = entries_.emplace(request.name, std::move(e)).first;
  }
  it->second.per_rank[rank] = std::move(request);
}

bool MessageTable::ready(const Entry& e, const std::vector<bool>& joined) const {
  for (int r = 0; r < size_; ++r) {
    if (!e.per_rank[r] && !joined[r]) return false;
  }
  return true;
}

void MessageTable::take_ready(const std::vector<bool>& joined, std::vector<Response>& out) {
  for (auto it = order_.begin(); it != order_.end();) {
    auto entry = entries_.find(it->second);
    if (!ready(entry->second, joined)) {
      ++it;
      continue;
    }
    out.push_back(make_response(it->second, entry->second.per_rank, mode_));
    entries_.erase(entry);
    it = order_.erase(it);
  }
}

std::vector<MessageTable::Waiting> MessageTable::waiting(const std::vector<bool>& joined,
                                                         Clock::time_point now) const {
  std::vector<Waiting> out;
  for (const auto& [seq, name] : order_) {
    const Entry& e = entries_.at(name);
    Waiting w{name, OpType::kAllreduce, {}, {}, now - e.first_seen};
    for (int r = 0; r < size_; ++r) {
      if (e.per_rank[r]) {
        w.submitted.push_back(r);
        w.op = e.per_rank[r]->op;
      } else if (!joined[r]) {
        w.missing.push_back(r);
      }
    }
    if (!w.missing.empty()) out.push_back(std::move(w));
  }
  return out;
}

}  // namespace chorus::engine
