// The message table: every rank's announced requests, by name, until every rank has one.
// Every rank keeps an identical copy (each full negotiation gives all ranks the same
// messages, applied in rank order), so every rank derives the same ready list in the same
// order without a coordinator's answer.
//
// Thread safety: engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/response.h"
#include "util/deadline.h"

namespace chorus::engine {

class MessageTable {
 public:
  MessageTable(int size, JoinMode mode) : size_(size), mode_(mode) {}

  // Records rank's request (first seen time is local; only the stall inspector uses it).
  void add(int rank, Request request, Clock::time_point now);
  // Appends, in announcement order, the responses of every entry that each rank has
  // submitted or has joined (`joined[r]`), and removes them.
  void take_ready(const std::vector<bool>& joined, std::vector<Response>& out);
  bool empty() const { return entries_.empty(); }

  // An entry some ranks have not submitted yet.
  struct Waiting {
    std::string name;
    OpType op;
    std::vector<int> submitted;
    std::vector<int> missing;
    Clock::duration age;
  };
  std::vector<Waiting> waiting(const std::vector<bool>& joined, Clock::time_point now) const;

 private:
  struct Entry {
    std::vector<std::optional<Request>> per_rank;
    Clock::time_point first_seen;
    uint64_t seq = 0;
  };
  bool ready(const Entry& e, const std::vector<bool>& joined) const;

  int size_;
  JoinMode mode_;
  uint64_t next_seq_ = 0;
  std::unordered_map<std::string, Entry> entries_;
  std::map<uint64_t, std::string> order_;  // announcement order
};

}  // namespace chorus::engine
