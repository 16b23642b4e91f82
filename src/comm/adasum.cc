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
#include <cfloat>
#include <cmath>
#include <cstring>
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

// Sums `d` over the 2 * level ranks that share this rank's bits above `level` (recursive
// doubling: both partners add the same two numbers, so the sums agree to the bit).
void group_sum(Context& ctx, Dots& d, int level) {
  for (int k = 1; k <= level; k *= 2) {
    double mine[3] = {d.ab, d.aa, d.bb}, theirs[3];
    exchange(ctx, ctx.rank() ^ k, mine, sizeof mine, theirs, sizeof theirs);
    d.ab = mine[0] + theirs[0];
    d.aa = mine[1] + theirs[1];
    d.bb = mine[2] + theirs[2];
  }
}

// The combination on `w` (n elements of the working type W), in place on every rank.
template <typename W>
void vhdd(Context& ctx, W* w, size_t n) {
  const int p = ctx.size(), r = ctx.rank();
  std::vector<std::pair<size_t, size_t>> held;  // the range held before each level
  size_t lo = 0, hi = n;
  for (int d = 1; d < p; d *= 2) {
    const bool upper = (r & d) != 0;
    const size_t mid = lo + (hi - lo) / 2;
    const size_t keep = upper ? mid : lo, keep_end = upper ? hi : mid;
    const size_t give = upper ? lo : mid, give_end = upper ? mid : hi;
    const size_t m = keep_end - keep;
    W* theirs = reinterpret_cast<W*>(ctx.ws.incoming.get(m * sizeof(W)));
    exchange(ctx, r ^ d, w + give, (give_end - give) * sizeof(W), theirs, m * sizeof(W));
    W* mine = w + keep;
    Dots dots = upper ? partial_dots(theirs, mine, m) : partial_dots(mine, theirs, m);
    group_sum(ctx, dots, d);
    const auto [ca, cb] = coefficients(dots);
    if (upper) {
      scaled_add(mine, cb, theirs, ca, m);
    } else {
      scaled_add(mine, ca, theirs, cb, m);
    }
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

// 16-bit floats are combined in float32 (their bits are rounded once, at the end).
void widen(DataType type, const void* in, float* out, size_t n) {
  const auto* h = static_cast<const uint16_t*>(in);
  for (size_t i = 0; i < n; ++i) {
    out[i] = type == DataType::kFloat16 ? half_to_float(h[i]) : bfloat16_to_float(h[i]);
  }
}

void narrow(DataType type, const float* in, void* out, size_t n) {
  auto* h = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; ++i) {
    h[i] = type == DataType::kFloat16 ? float_to_half(in[i]) : float_to_bfloat16(in[i]);
  }
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

}  // namespace

void adasum_vhdd(Context& ctx, const void* send, void* recv, size_t count, DataType type) {
  if (type == DataType::kFloat32 || type == DataType::kFloat64) {
    if (send != recv) std::memcpy(recv, send, count * dtype_size(type));
    if (type == DataType::kFloat32) return vhdd(ctx, static_cast<float*>(recv), count);
    return vhdd(ctx, static_cast<double*>(recv), count);
  }
  auto* w = reinterpret_cast<float*>(ctx.ws.accumulator.get(count * sizeof(float)));
  widen(type, send, w, count);
  vhdd(ctx, w, count);
  narrow(type, w, recv, count);
}

void adasum_gathered(const void* gathered, void* recv, size_t count, int ranks, DataType type,
                     Scratch& scratch) {
  const size_t all = count * static_cast<size_t>(ranks);
  if (type == DataType::kFloat64) {
    auto* w = reinterpret_cast<double*>(scratch.get(all * sizeof(double)));
    std::memcpy(w, gathered, all * sizeof(double));
    combine_gathered(w, count, ranks);
    std::memcpy(recv, w, count * sizeof(double));
    return;
  }
  auto* w = reinterpret_cast<float*>(scratch.get(all * sizeof(float)));
  if (type == DataType::kFloat32) {
    std::memcpy(w, gathered, all * sizeof(float));
  } else {
    widen(type, gathered, w, all);
  }
  combine_gathered(w, count, ranks);
  if (type == DataType::kFloat32) {
    std::memcpy(recv, w, count * sizeof(float));
  } else {
    narrow(type, w, recv, count);
  }
}

}  // namespace chorus::comm
