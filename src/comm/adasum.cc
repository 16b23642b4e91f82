// Adasum, Horovod's adaptive summation (Maleki et al., "Scaling Distributed Training with
// Adaptive Summation", MLSys 2021), over a binary tree of the ranks in order: ranks (0, 1),
// (2, 3) ... combine, then those results pairwise, with
//   combine(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
// a coefficient 1 where its |.|^2 is under sqrt(DBL_MIN); dot products and norms in float64.
//
// Vector-halving distance-doubling (as Horovod's CPU Adasum): at distance d = 1, 2, 4 ...
// a rank and its partner r ^ d hold the same range of their groups' vectors; each keeps
// one half and receives the partner's copy of it, so it holds that half of both a (the
// group with bit d clear) and b. The 2d ranks of the new group hold disjoint pieces of the
// whole: their partial dot products, summed among them, give the coefficients, and each
// combines its piece. After lg p levels each rank holds 1/p of the result, which a
// distance-halving allgather hands to every rank. Each rank sends about twice the tensor
// in all. Every piece is computed on one rank and copied to the others, and the group sums
// are sums of the same two addends on both sides, so every rank gets the same bits.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "chorus/error.h"
#include "comm/algorithms.h"
#include "util/reduce.h"

namespace chorus::comm {
namespace {

struct Dots {
  double ab = 0.0, aa = 0.0, bb = 0.0;
};
static_assert(sizeof(Dots) == 3 * sizeof(double), "group_sum sends Dots as doubles");

// In eight lanes, added up in a fixed order at the end: eight independent chains of
// additions instead of one (the sums' order is this function's, the same on every rank).
template <typename W>
Dots partial_dots(const W* a, const W* b, size_t n) {
  constexpr size_t kLanes = 8;
  double ab[kLanes] = {}, aa[kLanes] = {}, bb[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const double x = a[i + l], y = b[i + l];
      ab[l] += x * y;
      aa[l] += x * x;
      bb[l] += y * y;
    }
  }
  for (size_t l = 0; i < n; ++i, ++l) {
    const double x = a[i], y = b[i];
    ab[l] += x * y;
    aa[l] += x * x;
    bb[l] += y * y;
  }
  Dots d;
  for (size_t l = 0; l < kLanes; ++l) {
    d.ab += ab[l];
    d.aa += aa[l];
    d.bb += bb[l];
  }
  return d;
}

std::pair<double, double> coefficients(const Dots& d) {
  static const double kNegligible = std::sqrt(DBL_MIN);
  return {d.aa >= kNegligible ? 1.0 - d.ab / d.aa * 0.5 : 1.0,
          d.bb >= kNegligible ? 1.0 - d.ab / d.bb * 0.5 : 1.0};
}

// x = cx x + cy y, element by element in float64 (x and y apart: the loop vectorises).
template <typename W>
void scaled_add(W* __restrict x, double cx, const W* __restrict y, double cy, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<W>(cx * static_cast<double>(x[i]) + cy * static_cast<double>(y[i]));
  }
}

// Sums every tensor's `dots` over the 2 * level ranks that share this rank's bits above
// `level` (recursive doubling: both partners add the same two numbers, so the sums agree
// to the bit).
void group_sum(Context& ctx, std::vector<Dots>& dots, std::vector<Dots>& theirs, int level) {
  theirs.resize(dots.size());
  const size_t bytes = dots.size() * sizeof(Dots);
  for (int k = 1; k <= level; k *= 2) {
    exchange(ctx, ctx.rank() ^ k, dots.data(), bytes, theirs.data(), bytes);
    for (size_t t = 0; t < dots.size(); ++t) {
      dots[t].ab += theirs[t].ab;
      dots[t].aa += theirs[t].aa;
      dots[t].bb += theirs[t].bb;
    }
  }
}

// Calls fn(t, from, to) for each tensor t (elements [bounds[t], bounds[t + 1])) that
// overlaps [lo, hi), with the overlap [from, to).
template <typename Fn>
void for_each_overlap(const std::vector<size_t>& bounds, size_t lo, size_t hi, Fn&& fn) {
  size_t t = std::upper_bound(bounds.begin(), bounds.end(), lo) - bounds.begin();
  for (t = t == 0 ? 0 : t - 1; t + 1 < bounds.size() && bounds[t] < hi; ++t) {
    const size_t from = std::max(lo, bounds[t]), to = std::min(hi, bounds[t + 1]);
    if (from < to) fn(t, from, to);
  }
}

// The combination on `w`, the tensors laid end to end (tensor t: elements [bounds[t],
// bounds[t + 1]) of the working type W), each with its own coefficients, in place on every
// rank.
template <typename W>
void vhdd(Context& ctx, W* w, const std::vector<size_t>& bounds) {
  const int p = ctx.size(), r = ctx.rank();
  std::vector<std::pair<size_t, size_t>> held;  // the range held before each level
  std::vector<Dots> dots(bounds.size() - 1), theirs_dots;
  size_t lo = 0, hi = bounds.back();
  for (int d = 1; d < p; d *= 2) {
    const bool upper = (r & d) != 0;
    const size_t mid = lo + (hi - lo) / 2;
    const size_t keep = upper ? mid : lo, keep_end = upper ? hi : mid;
    const size_t give = upper ? lo : mid, give_end = upper ? mid : hi;
    W* in = reinterpret_cast<W*>(ctx.ws.incoming.get((keep_end - keep) * sizeof(W)));
    exchange(ctx, r ^ d, w + give, (give_end - give) * sizeof(W), in,
             (keep_end - keep) * sizeof(W));
    auto theirs = [&](size_t i) { return in + (i - keep); };  // the partner's element i
    // a: the vector of the ranks whose bit d is clear, b: the others'.
    std::fill(dots.begin(), dots.end(), Dots{});
    for_each_overlap(bounds, keep, keep_end, [&](size_t t, size_t from, size_t to) {
      dots[t] = upper ? partial_dots(theirs(from), w + from, to - from)
                      : partial_dots(w + from, theirs(from), to - from);
    });
    group_sum(ctx, dots, theirs_dots, d);
    for_each_overlap(bounds, keep, keep_end, [&](size_t t, size_t from, size_t to) {
      const auto [ca, cb] = coefficients(dots[t]);
      scaled_add(w + from, upper ? cb : ca, theirs(from), upper ? ca : cb, to - from);
    });
    held.emplace_back(lo, hi);
    lo = keep;
    hi = keep_end;
  }
  for (int d = p / 2; d >= 1; d /= 2) {
    const auto [plo, phi] = held.back();
    held.pop_back();
    const size_t mid = plo + (phi - plo) / 2;
    const bool upper = (r & d) != 0;
    const size_t other = upper ? plo : mid, other_end = upper ? mid : phi;
    exchange(ctx, r ^ d, w + lo, (hi - lo) * sizeof(W), w + other, (other_end - other) * sizeof(W));
    lo = plo;
    hi = phi;
  }
}

// Into the working type W: float32 and float64 as they are, 16-bit floats widened to
// float32 (their bits are rounded once, at the end, by from_working).
template <typename W>
void to_working(DataType type, const void* in, W* out, size_t n) {
  if (n == 0) return;
  if constexpr (std::is_same_v<W, float>) {
    if (type != DataType::kFloat32) {
      const auto* h = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) {
        out[i] = type == DataType::kFloat16 ? half_to_float(h[i]) : bfloat16_to_float(h[i]);
      }
      return;
    }
  }
  std::memcpy(out, in, n * sizeof(W));
}

template <typename W>
void from_working(DataType type, const W* in, void* out, size_t n) {
  if (n == 0) return;
  if constexpr (std::is_same_v<W, float>) {
    if (type != DataType::kFloat32) {
      auto* h = static_cast<uint16_t*>(out);
      for (size_t i = 0; i < n; ++i) {
        h[i] = type == DataType::kFloat16 ? float_to_half(in[i]) : float_to_bfloat16(in[i]);
      }
      return;
    }
  }
  std::memcpy(out, in, n * sizeof(W));
}

// The tree over `ranks` vectors of n elements laid end to end, into the first.
template <typename W>
void combine_gathered(W* all, size_t n, int ranks) {
  for (int width = 1; width < ranks; width *= 2) {
    for (int left = 0; left < ranks; left += 2 * width) {
      W* a = all + left * n;
      const W* b = all + (left + width) * n;
      const auto [ca, cb] = coefficients(partial_dots(a, b, n));
      scaled_add(a, ca, b, cb, n);
    }
  }
}

// The parts laid end to end in `scratch` in the working type, combined, and put back.
template <typename W>
void vhdd_packed(Context& ctx, const std::vector<BufferPart>& parts,
                 const std::vector<size_t>& bounds, DataType type) {
  auto* w = reinterpret_cast<W*>(ctx.ws.staging.get(bounds.back() * sizeof(W)));
  for (size_t i = 0; i < parts.size(); ++i) {
    to_working(type, parts[i].send, w + bounds[i], parts[i].count);
  }
  vhdd(ctx, w, bounds);
  for (size_t i = 0; i < parts.size(); ++i) {
    from_working(type, w + bounds[i], parts[i].recv, parts[i].count);
  }
}

template <typename W>
void gathered_in(const void* gathered, void* recv, size_t count, int ranks, DataType type,
                 Scratch& scratch) {
  const size_t all = count * static_cast<size_t>(ranks);
  auto* w = reinterpret_cast<W*>(scratch.get(all * sizeof(W)));
  to_working(type, gathered, w, all);
  combine_gathered(w, count, ranks);
  from_working(type, w, recv, count);
}

}  // namespace

void adasum_vhdd(Context& ctx, const std::vector<BufferPart>& parts, DataType type) {
  std::vector<size_t> bounds{0};
  for (const BufferPart& part : parts) bounds.push_back(bounds.back() + part.count);
  if (parts.size() == 1 && (type == DataType::kFloat32 || type == DataType::kFloat64)) {
    const BufferPart& part = parts[0];  // in the caller's buffer, no packing
    if (part.send != part.recv) std::memcpy(part.recv, part.send, part.count * dtype_size(type));
    if (type == DataType::kFloat32) return vhdd(ctx, static_cast<float*>(part.recv), bounds);
    return vhdd(ctx, static_cast<double*>(part.recv), bounds);
  }
  if (type == DataType::kFloat64) return vhdd_packed<double>(ctx, parts, bounds, type);
  vhdd_packed<float>(ctx, parts, bounds, type);
}

void adasum_gathered(const void* gathered, void* recv, size_t count, int ranks, DataType type,
                     Scratch& scratch) {
  if (type == DataType::kFloat64)
    return gathered_in<double>(gathered, recv, count, ranks, type, scratch);
  gathered_in<float>(gathered, recv, count, ranks, type, scratch);
}

}  // namespace chorus::comm
