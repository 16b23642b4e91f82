// Process sets: ProcessSet, the table of an engine's sets, and Engine's process-set calls.
#include <algorithm>
#include <sstream>

#include "chorus/error.h"
#include "engine/engine_impl.h"
#include "engine/process_set_table.h"

namespace chorus {
namespace {

std::string ranks_text(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << ']';
  return out.str();
}

// Sorts `ranks`; "" when they are a valid set of ranks of a `size`-rank group, else why not.
std::string check_ranks(std::vector<int>& ranks, int size) {
  if (ranks.empty()) return "a process set needs at least one rank";
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size) {
      return "rank " + std::to_string(ranks[i]) + " is out of range [0, " + std::to_string(size) +
             ")";
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) {
      return "rank " + std::to_string(ranks[i]) + " is listed twice";
    }
  }
  return "";
}

}  // namespace

ProcessSet::ProcessSet(int id, std::vector<int> ranks, int parent_rank,
                       std::unique_ptr<Engine> engine, Engine* parent)
    : id_(id),
      ranks_(std::move(ranks)),
      rank_(rank_of(parent_rank)),
      owned_(std::move(engine)),
      engine_(owned_ ? owned_.get() : parent) {}

ProcessSet::~ProcessSet() = default;

int ProcessSet::rank_of(int parent_rank) const {
  auto it = std::lower_bound(ranks_.begin(), ranks_.end(), parent_rank);
  return it != ranks_.end() && *it == parent_rank ? static_cast<int>(it - ranks_.begin()) : -1;
}

Engine& ProcessSet::engine() const {
  CHORUS_CHECK_ARG(!removed_.load(), "process set ", id_, " was removed");
  CHORUS_CHECK_ARG(engine_ != nullptr, "this rank is not in process set ", id_, " (ranks ",
                   ranks_text(ranks_), ")");
  return *engine_;
}

bool ProcessSet::removed() const { return removed_.load(); }

void ProcessSet::retire() {
  removed_ = true;
  if (owned_) owned_->shutdown();
}

namespace engine {

ProcessSetTable::ProcessSetTable(Communicator& comm, const EngineOptions& options)
    : comm_(comm), child_options_(options) {
  child_options_.timeline_path.clear();  // rank 0 of the parent writes the one timeline
}

std::vector<std::vector<int32_t>> ProcessSetTable::gather(Engine& parent,
                                                          const std::vector<int32_t>& mine) {
  const auto width = static_cast<int64_t>(mine.size());
  std::string name = "chorus.process_set." + std::to_string(agreements_++);
  Handle h = parent.allgather(name, mine.data(), DataType::kInt32, {1, width});
  h.wait();
  const auto* all = static_cast<const int32_t*>(h.data());
  std::vector<std::vector<int32_t>> rows;
  for (int r = 0; r < parent.size(); ++r) rows.emplace_back(all + r * width, all + (r + 1) * width);
  return rows;
}

std::shared_ptr<ProcessSet> ProcessSetTable::add(Engine& parent, std::vector<int> ranks) {
  const int size = parent.size();
  std::string invalid = check_ranks(ranks, size);
  // Row: [valid, n, ranks..., -1 padding]: fixed width, so one allgather shows every list.
  std::vector<int32_t> row(size + 2, -1);
  row[0] = invalid.empty() ? 1 : 0;
  row[1] = invalid.empty() ? static_cast<int32_t>(ranks.size()) : 0;
  if (invalid.empty()) std::copy(ranks.begin(), ranks.end(), row.begin() + 2);
  auto rows = gather(parent, row);
  CHORUS_CHECK_ARG(invalid.empty(), "add_process_set: ", invalid);
  for (int r = 0; r < size; ++r) {
    CHORUS_CHECK_ARG(rows[r][0] == 1, "add_process_set: rank ", r, " passed an invalid rank list");
  }
  for (int r = 1; r < size; ++r) {
    if (rows[r] == rows[0]) continue;
    std::vector<int> theirs(rows[r].begin() + 2, rows[r].begin() + 2 + rows[r][1]);
    std::vector<int> first(rows[0].begin() + 2, rows[0].begin() + 2 + rows[0][1]);
    CHORUS_THROW(InvalidArgument, "add_process_set: the ranks differ between ranks: rank 0 passed ",
                 ranks_text(first), ", rank ", r, " passed ", ranks_text(theirs));
  }
  CHORUS_CHECK_ARG(static_cast<int>(ranks.size()) < size, "add_process_set: ", ranks_text(ranks),
                   " is every rank: that is process set 0");
  int id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [existing, set] : sets_) {
      CHORUS_CHECK_ARG(set->ranks() != ranks, "add_process_set: process set ", existing,
                       " has the ranks ", ranks_text(ranks), " already");
    }
    id = next_id_++;
  }
  std::unique_ptr<Engine> engine;
  if (std::binary_search(ranks.begin(), ranks.end(), parent.rank())) {
    engine = Engine::start(comm_.split(ranks, "process_set/" + std::to_string(id)), child_options_);
  }
  auto set = std::make_shared<ProcessSet>(id, ranks, parent.rank(), std::move(engine));
  std::lock_guard<std::mutex> lock(mu_);
  sets_.emplace(id, set);
  return set;
}

void ProcessSetTable::remove(Engine& parent, int id) {
  auto rows = gather(parent, {id});
  for (int r = 1; r < parent.size(); ++r) {
    CHORUS_CHECK_ARG(rows[r][0] == rows[0][0],
                     "remove_process_set: the ids differ between ranks: rank 0 passed ", rows[0][0],
                     ", rank ", r, " passed ", rows[r][0]);
  }
  CHORUS_CHECK_ARG(id != 0, "remove_process_set: process set 0 (every rank) cannot be removed");
  std::shared_ptr<ProcessSet> set;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sets_.find(id);
    CHORUS_CHECK_ARG(it != sets_.end(), "remove_process_set: no process set ", id);
    set = it->second;
    sets_.erase(it);
  }
  set->retire();
}

std::shared_ptr<ProcessSet> ProcessSetTable::whole_group(Engine& parent) const {
  std::vector<int> all(parent.size());
  for (int r = 0; r < parent.size(); ++r) all[r] = r;
  return std::make_shared<ProcessSet>(0, std::move(all), parent.rank(), nullptr, &parent);
}

std::shared_ptr<ProcessSet> ProcessSetTable::find(Engine& parent, int id) const {
  if (id == 0) return whole_group(parent);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ProcessSet>> ProcessSetTable::all(Engine& parent) const {
  std::vector<std::shared_ptr<ProcessSet>> out{whole_group(parent)};
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, set] : sets_) out.push_back(set);
  return out;
}

void ProcessSetTable::retire_all() {
  std::map<int, std::shared_ptr<ProcessSet>> sets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sets.swap(sets_);
  }
  for (auto& [id, set] : sets) set->retire();
}

}  // namespace engine

std::shared_ptr<ProcessSet> Engine::add_process_set(std::vector<int> ranks) {
  return impl_->sets.add(*this, std::move(ranks));
}

void Engine::remove_process_set(int id) { impl_->sets.remove(*this, id); }

std::shared_ptr<ProcessSet> Engine::process_set(int id) const {
  return impl_->sets.find(const_cast<Engine&>(*this), id);
}

std::vector<std::shared_ptr<ProcessSet>> Engine::process_sets() const {
  return impl_->sets.all(const_cast<Engine&>(*this));
}

}  // namespace chorus
