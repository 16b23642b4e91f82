// PsClient: creating, pulling, pushing, stats, shutdown (save/restore: client_state.cc).
#include "chorus/ps/client.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "chorus/error.h"
#include "client_impl.h"
#include "util/env.h"

namespace chorus::ps {
namespace {

using rendezvous::PayloadReader;
using rendezvous::PayloadWriter;
using std::chrono::milliseconds;

constexpr milliseconds kShutdownLimit{5000};

// The bulk of a create or push to one ps: each of its shards, cut from the whole arrays.
std::vector<wire::Piece> shard_pieces(const PartLayout& part,
                                      const std::vector<const float*>& arrays) {
  std::vector<wire::Piece> bulk;
  for (const Shard& s : part.shards) {
    bulk.push_back({arrays[static_cast<size_t>(s.variable)] + s.offset,
                    static_cast<size_t>(s.length) * sizeof(float)});
  }
  return bulk;
}

// Reads a kOk reply's fields with `read`; they must be all there is. A reply that does not
// parse, or a layout that breaks the limits, comes from a broken or hostile ps:
// UnavailableError, as for any other broken connection (the client is unusable after it).
template <typename F>
void parse_reply(const PsConnection& conn, const std::string& meta, const char* what, F&& read) {
  PayloadReader in(meta);
  try {
    read(in);
    in.finish();
  } catch (const IoError& e) {
    CHORUS_THROW(UnavailableError, conn.name(), " sent a malformed ", what, ": ", e.what());
  } catch (const InvalidArgument& e) {
    CHORUS_THROW(UnavailableError, conn.name(), " sent an invalid ", what, ": ", e.what());
  }
}

}  // namespace

void PsClient::Impl::require_layout(const char* what) const {
  CHORUS_CHECK_ARG(has_layout, what, ": call create() or wait_for_variables() first");
}

void PsClient::Impl::check_arrays(size_t n, const char* what) const {
  CHORUS_CHECK_ARG(n == layout.variables.size(), what, ": ", n, " arrays for ",
                   layout.variables.size(), " variables");
}

PsClient::PsClient(std::vector<std::string> ps_addresses, Secret secret, milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  CHORUS_CHECK_ARG(!ps_addresses.empty(), "PsClient needs at least one parameter server");
  CHORUS_CHECK_ARG(static_cast<int>(ps_addresses.size()) <= kMaxPs, "too many parameter servers");
  CHORUS_CHECK_ARG(!secret.empty(), "PsClient needs the job secret");
  impl_->timeout = timeout.count() > 0 ? timeout : default_timeout();
  for (size_t i = 0; i < ps_addresses.size(); ++i) {
    impl_->ps.push_back(std::make_unique<PsConnection>(static_cast<int>(i), ps_addresses[i], secret,
                                                       impl_->timeout));
  }
}

PsClient::~PsClient() = default;

int PsClient::num_ps() const { return static_cast<int>(impl_->ps.size()); }

void PsClient::create(const ModelLayout& layout, const std::vector<const float*>& initial,
                      const CreateOptions& options) {
  check_layout(layout.variables, layout.shards, num_ps());
  PsConfig config{options.optimizer, options.mode, options.num_workers};
  check_config(config);
  CHORUS_CHECK_ARG(initial.size() == layout.variables.size(), "create: ", initial.size(),
                   " initial arrays for ", layout.variables.size(), " variables");
  for (const float* p : initial) CHORUS_CHECK_ARG(p != nullptr, "create: a null initial array");
  for (auto& conn : impl_->ps) {
    conn->part = part_of(layout, conn->index(), num_ps());
    conn->config = config;
    conn->has_part = true;
  }
  impl_->layout = layout;
  impl_->has_layout = true;
  impl_->each([&](PsConnection& conn) {
    PayloadWriter meta;
    put_part(meta, conn.part);
    put_config(meta, conn.config);
    conn.send(wire::Type::kCreate, meta.take(), shard_pieces(conn.part, initial));
    conn.receive_meta();
  });
}

// Asks every ps that has not answered yet for its part; true when all have one.
bool PsClient::Impl::collect_layouts() {
  each([](PsConnection& conn) {
    if (conn.has_part) return;
    conn.send(wire::Type::kLayout, {});
    std::string meta = conn.receive_meta();
    bool created = false;  // the ps has variables yet
    parse_reply(conn, meta, "layout", [&](PayloadReader& in) {
      created = in.u8() != 0;
      if (!created) return;
      conn.part = get_part(in);
      conn.config = get_config(in);
    });
    conn.has_part = created;
  });
  return std::all_of(ps.begin(), ps.end(), [](const auto& c) { return c->has_part; });
}

void PsClient::Impl::assemble_layout() {
  const int n = static_cast<int>(ps.size());
  layout = ModelLayout{ps[0]->part.variables, {}};
  for (auto& conn : ps) {
    const PartLayout& part = conn->part;
    CHORUS_CHECK_ARG(part.ps_index == conn->index() && part.num_ps == n, conn->name(),
                     " says it is ps ", part.ps_index, " of ", part.num_ps,
                     ": the tasks disagree on the list of ps addresses");
    PartLayout other = ps[0]->part;
    other.ps_index = part.ps_index;
    other.shards = part.shards;
    CHORUS_CHECK_ARG(same_layout(part, other), conn->name(), " holds other variables than ",
                     ps[0]->name(),
                     ": the chief is re-creating them, or the ps belong to "
                     "different jobs");
    layout.shards.insert(layout.shards.end(), part.shards.begin(), part.shards.end());
  }
  std::sort(layout.shards.begin(), layout.shards.end(), [](const Shard& a, const Shard& b) {
    return a.variable != b.variable ? a.variable < b.variable : a.offset < b.offset;
  });
  check_layout(layout.variables, layout.shards, n);
  has_layout = true;
}

const ModelLayout& PsClient::wait_for_variables(const std::vector<VariableSpec>& expected) {
  if (!impl_->has_layout) {
    Deadline deadline = Deadline::after(impl_->timeout);
    milliseconds backoff(20);
    while (!impl_->collect_layouts()) {
      if (deadline.expired()) {
        std::string missing;
        for (auto& c : impl_->ps) {
          if (!c->has_part) missing += " " + std::to_string(c->index());
        }
        CHORUS_THROW(TimeoutError, "wait_for_variables: parameter servers", missing,
                     " have no "
                     "variables after ",
                     impl_->timeout.count(), " ms (has the chief called create()?)");
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, milliseconds(500));
    }
    impl_->assemble_layout();
  }
  const auto& have = impl_->layout.variables;
  if (expected.empty()) return impl_->layout;  // take whatever the chief created
  CHORUS_CHECK_ARG(have.size() == expected.size(),
                   "wait_for_variables: the parameter servers hold ", have.size(),
                   " variables, this program has ", expected.size());
  for (size_t i = 0; i < have.size(); ++i) {
    CHORUS_CHECK_ARG(have[i].name == expected[i].name && have[i].numel == expected[i].numel,
                     "wait_for_variables: variable ", i, " is '", have[i].name, "' with ",
                     have[i].numel, " elements on the parameter servers, '", expected[i].name,
                     "' with ", expected[i].numel, " in this program");
  }
  return impl_->layout;
}

int64_t PsClient::pull(const std::vector<float*>& dst, int64_t min_version) {
  impl_->require_layout("pull");
  impl_->check_arrays(dst.size(), "pull");
  for (float* p : dst) CHORUS_CHECK_ARG(p != nullptr, "pull: a null destination array");
  std::vector<int64_t> versions(impl_->ps.size(), 0);
  const milliseconds wait = impl_->timeout;
  impl_->each([&](PsConnection& conn) {
    conn.send(wire::Type::kPull, PayloadWriter().i64(min_version).i64(wait.count()).take());
    uint64_t bulk = static_cast<uint64_t>(conn.part.elements()) * sizeof(float);
    std::string meta = conn.receive(bulk, wait);
    std::vector<wire::Slot> slots;
    for (const Shard& s : conn.part.shards) {
      slots.push_back({dst[static_cast<size_t>(s.variable)] + s.offset,
                       static_cast<size_t>(s.length) * sizeof(float)});
    }
    conn.recv_bulk(slots);  // straight into the caller's arrays
    parse_reply(conn, meta, "pull reply",
                [&](PayloadReader& in) { versions[static_cast<size_t>(conn.index())] = in.i64(); });
  });
  return *std::min_element(versions.begin(), versions.end());
}

void PsClient::push(const std::vector<const float*>& grads, int64_t version, double learning_rate) {
  impl_->require_layout("push");
  impl_->check_arrays(grads.size(), "push");
  for (const float* p : grads) CHORUS_CHECK_ARG(p != nullptr, "push: a null gradient array");
  CHORUS_CHECK_ARG(!std::isnan(learning_rate) && learning_rate < INFINITY, "push: learning rate ",
                   learning_rate, " is not a finite number");
  if (learning_rate < 0) learning_rate = -1;
  impl_->each([&](PsConnection& conn) {
    PayloadWriter meta;
    meta.i64(version);
    meta.f64(learning_rate);
    conn.send(wire::Type::kPush, meta.take(), shard_pieces(conn.part, grads));
    conn.receive_meta();
  });
}

PsStats PsClient::stats(int ps_index) {
  CHORUS_CHECK_ARG(ps_index >= 0 && ps_index < num_ps(), "stats: no parameter server ", ps_index);
  PsStats stats;
  impl_->each(
      [&](PsConnection& conn) {
        conn.send(wire::Type::kStats, {});
        std::string meta = conn.receive_meta();
        parse_reply(conn, meta, "stats reply", [&](PayloadReader& in) {
          stats = PsStats{in.i64(), in.i64(), in.i64(), in.i64()};  // braced: read in order
        });
      },
      ps_index);
  return stats;
}

void PsClient::shutdown_servers() {
  std::vector<std::thread> threads;
  for (auto& conn : impl_->ps) {
    threads.emplace_back([&conn] { conn->shutdown_quietly(kShutdownLimit); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace chorus::ps
