#include "adasum.h"

#include <ATen/Functions.h>

#include <cfloat>
#include <cmath>

namespace chorus::python {
namespace {

// a = combine(a, b) over n elements, sequentially (the same order, hence bits, everywhere).
void combine(double* a, const double* b, int64_t n) {
  double dot = 0.0, aa = 0.0, bb = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  static const double kNegligible = std::sqrt(DBL_MIN);
  const double ca = aa >= kNegligible ? 1.0 - dot / aa * 0.5 : 1.0;
  const double cb = bb >= kNegligible ? 1.0 - dot / bb * 0.5 : 1.0;
  for (int64_t i = 0; i < n; ++i) a[i] = ca * a[i] + cb * b[i];
}

}  // namespace

bool adasum_ranks_supported(int64_t ranks) { return ranks >= 1 && (ranks & (ranks - 1)) == 0; }

void adasum_into(const at::Tensor& gathered, int64_t ranks, double prescale, double postscale,
                 at::Tensor& out) {
  // float64, combined in place (the gathered tensor is the caller's to give up).
  at::Tensor all = gathered.to(at::kDouble).contiguous();
  if (prescale != 1.0) all.mul_(prescale);
  double* base = all.data_ptr<double>();
  const int64_t n = out.numel();
  for (int64_t width = 1; width < ranks; width *= 2) {
    for (int64_t left = 0; left < ranks; left += 2 * width) {
      combine(base + left * n, base + (left + width) * n, n);
    }
  }
  at::Tensor result = all.narrow(0, 0, n);
  if (postscale != 1.0) result.mul_(postscale);
  out.copy_(result.view(out.sizes()));
}

}  // namespace chorus::python
