// Cross-rank validation: turns the requests of every rank for one name into the response
// they all run, or into the error they all get ("Mismatched ... for 'name': rank 0 has X,
// rank 1 has Y").
#include <functional>
#include <sstream>

#include "chorus/error.h"
#include "engine/request.h"
#include "engine/response.h"

namespace chorus::engine {
namespace {

using PerRank = std::vector<std::optional<Request>>;

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

using Text = std::function<std::string(const Request&)>;

// "Mismatched <what> for '<name>': rank a has X, rank b has Y[, ...]" listing the first
// submitting rank and every rank whose `key` differs from it (shown as `shown`, by default
// the key itself); empty when all agree.
std::string mismatch_text(const std::string& what, const std::string& name, const PerRank& reqs,
                          const Text& key, const Text& shown = nullptr) {
  int first = -1;
  std::string ref;
  std::ostringstream out;
  bool differs = false;
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (!reqs[r]) continue;
    std::string k = key(*reqs[r]);
    std::string v = shown ? shown(*reqs[r]) : k;
    if (first < 0) {
      first = static_cast<int>(r);
      ref = k;
      out << "Mismatched " << what << " for '" << name << "': rank " << r << " has " << v;
    } else if (k != ref) {
      differs = true;
      out << ", rank " << r << " has " << v;
    }
  }
  return differs ? out.str() : std::string();
}

std::vector<int64_t> trailing_dims(const Request& r) {
  if (r.shape.empty()) return {};
  return std::vector<int64_t>(r.shape.begin() + 1, r.shape.end());
}

bool is_reduction(OpType op) { return op == OpType::kAllreduce || op == OpType::kReduceScatter; }

// The first mismatch among the fields that must agree for `op`, or "".
std::string find_mismatch(const std::string& name, const PerRank& reqs, OpType op) {
  std::string e = mismatch_text("operations", name, reqs,
                                [](const Request& r) { return std::string(op_type_name(r.op)); });
  if (!e.empty()) return e;
  if (op == OpType::kBarrier) return "";
  e = mismatch_text("data types", name, reqs,
                    [](const Request& r) { return std::string(dtype_name(r.dtype)); });
  if (!e.empty()) return e;
  std::string op_name = op_type_name(op);
  if (op == OpType::kAllgather || op == OpType::kAlltoall) {
    return mismatch_text(
        op_name + " tensor shapes (dimensions after the first must agree)", name, reqs,
        [](const Request& r) {
          return std::to_string(r.shape.size()) + shape_text(trailing_dims(r));
        },
        [](const Request& r) { return shape_text(r.shape); });
  }
  e = mismatch_text(op_name + " tensor shapes", name, reqs,
                    [](const Request& r) { return shape_text(r.shape); });
  if (!e.empty()) return e;
  if (op == OpType::kBroadcast) {
    return mismatch_text("broadcast root ranks", name, reqs,
                         [](const Request& r) { return std::to_string(r.root); });
  }
  if (!is_reduction(op)) return "";
  e = mismatch_text("reduce ops", name, reqs,
                    [](const Request& r) { return std::string(reduce_op_name(r.reduce)); });
  if (!e.empty()) return e;
  e = mismatch_text("prescale factors", name, reqs,
                    [](const Request& r) { return number_text(r.prescale); });
  if (!e.empty()) return e;
  return mismatch_text("postscale factors", name, reqs,
                       [](const Request& r) { return number_text(r.postscale); });
}

// "" when `rows` rows of `a`'s tensor fit in kMaxTensorBytes: the engine allocates outputs
// sized by other ranks' requests (each under the limit, checked at decoding), and their sum
// must not be an allocation no rank asked for. Every rank computes the same answer.
std::string check_output_rows(const Request& a, int64_t rows, const std::string& output) {
  const int64_t row_bytes = a.row_elements() * static_cast<int64_t>(dtype_size(a.dtype));
  if (row_bytes == 0 || rows <= kMaxTensorBytes / row_bytes) return "";
  return std::string(op_type_name(a.op)) + " '" + a.name + "': " + output + " would have " +
         std::to_string(rows) + " rows of " + std::to_string(row_bytes) + " bytes, over " +
         std::to_string(kMaxTensorBytes);
}

// Fills the per-rank parts (rows, splits) and checks what joined ranks cannot do.
std::string fill_layout(Response& resp, const PerRank& reqs, JoinMode mode) {
  const int size = static_cast<int>(reqs.size());
  const Request& a = resp.agreed;
  bool any_joined = resp.contributors < size;
  if (any_joined && mode == JoinMode::kHorovod && a.op != OpType::kAllreduce &&
      a.op != OpType::kBarrier) {
    return std::string(op_type_name(a.op)) + " '" + a.name +
           "' cannot run while ranks have joined (only allreduce and barrier can, as in Horovod)";
  }
  if (a.op == OpType::kAllgather) {
    resp.first_dims.assign(size, 0);
    int64_t rows = 0;  // each under 2^40, so no overflow for any world size an int holds
    for (int r = 0; r < size; ++r) {
      if (reqs[r]) rows += resp.first_dims[r] = reqs[r]->shape[0];
    }
    return check_output_rows(a, rows, "the gathered tensor");
  }
  if (a.op == OpType::kAlltoall) {
    if (any_joined) return "alltoall '" + a.name + "' cannot run while ranks have joined";
    resp.splits.clear();
    for (int r = 0; r < size; ++r) {
      resp.splits.insert(resp.splits.end(), reqs[r]->splits.begin(), reqs[r]->splits.end());
    }
    for (int dst = 0; dst < size; ++dst) {
      int64_t rows = 0;
      for (int src = 0; src < size; ++src) rows += resp.splits[src * size + dst];
      std::string e = check_output_rows(a, rows, "the output of rank " + std::to_string(dst));
      if (!e.empty()) return e;
    }
  } else if (a.op == OpType::kBroadcast && !reqs[a.root]) {
    return "broadcast '" + a.name + "': root rank " + std::to_string(a.root) + " has joined";
  }
  return "";
}

}  // namespace

Response make_response(const std::string& name, const PerRank& per_rank, JoinMode mode) {
  Response resp;
  for (const auto& r : per_rank) {
    if (!r) continue;
    if (resp.contributors++ == 0) resp.agreed = *r;
    resp.agreed.in_shared_memory = resp.agreed.in_shared_memory && r->in_shared_memory;
  }
  resp.divisor = mode == JoinMode::kHorovod ? static_cast<int>(per_rank.size()) : resp.contributors;
  std::string error = find_mismatch(name, per_rank, resp.agreed.op);
  if (error.empty()) error = fill_layout(resp, per_rank, mode);
  if (!error.empty()) {
    resp.error = detail::make_message(__FILE__, __LINE__, error);
    resp.agreed.name = name;
  }
  return resp;
}

}  // namespace chorus::engine
