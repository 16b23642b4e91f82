// Adasum, the adaptive summation of Horovod's op=hvd.Adasum (Maleki et al., "Scaling
// Distributed Training with Adaptive Summation", MLSys 2021), as Horovod computes it:
//   combine(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b,
// each coefficient 1 where its |.|^2 is under sqrt(DBL_MIN), over a binary tree of the
// ranks in order ((0, 1), (2, 3), ... then those results pairwise), with dot products and
// norms in float64. Orthogonal tensors add up, parallel ones average.
//
// chorus gathers every rank's tensor (an allgather) and each rank combines them itself, in
// float64 and in one fixed order, so every rank gets the same bits. That moves p times the
// tensor to each rank, where Horovod's vector-halving distance-doubling moves about twice
// it: fine for the per-layer gradients of a few ranks, not bandwidth-optimal at scale.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace chorus::python {

// Whether Adasum combines over `ranks` ranks (a power of two, as Horovod requires).
bool adasum_ranks_supported(int64_t ranks);

// `gathered`: every rank's tensor, flattened and concatenated in rank order (an allgather of
// the flattened tensors). Writes into `out` (the shape of one rank's tensor, any floating
// dtype) postscale * Adasum over the ranks of prescale * each rank's tensor.
// REQUIRES: adasum_ranks_supported(ranks); gathered.numel() == ranks * out.numel().
void adasum_into(const at::Tensor& gathered, int64_t ranks, double prescale, double postscale,
                 at::Tensor& out);

}  // namespace chorus::python
