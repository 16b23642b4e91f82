// Where DistributedOptimizer puts gradients when the ranks share memory: in buckets, each a
// contiguous range of one Engine::alloc_shared allocation, with every parameter's grad() a
// tensor over its slice (PyTorch DDP's gradient_as_bucket_view). A full bucket is one
// allreduce of one buffer that every rank maps, which the engine runs in shared memory: no
// copy into a fusion buffer, none through a link, none back.
#pragma once

#include <cstddef>
#include <vector>

#include "chorus/dtype.h"

namespace chorus::detail {

// What the layout needs to know of a parameter.
struct BucketParam {
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
};

// Which parameter goes where; computed from sizes and dtypes alone, so every rank that
// wraps the same parameters gets the same layout (and the same bucket allreduces).
// No libtorch here: the layout is tested without it.
struct BucketLayout {
  struct Bucket {
    std::vector<size_t> params;  // indices into the parameter list, in bucket order
    size_t offset = 0;           // bytes from the allocation's start (a multiple of 64)
    size_t bytes = 0;            // padding included: params plus the gaps that align them
    DataType dtype = DataType::kFloat32;
  };
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of;     // by parameter; -1: reduced in place
  std::vector<size_t> offset_of;  // by parameter: bytes from the allocation's start
  size_t total_bytes = 0;
};

// Where the shared heap puts gradients in shared memory as autograd makes them
// (torch/shared_heap.h), parameters of this many bytes or more are reduced where their
// gradients are: a copy into a bucket would cost more than the separate allreduce saves.
inline constexpr size_t kInPlaceMinBytes = size_t{1} << 20;

// Parameters are taken last to first (the order backward produces their gradients, so the
// first bucket fills first) and packed into buckets of one dtype of at most `bucket_bytes`
// each (a larger parameter gets a bucket of its own), every parameter at a 64-byte offset.
// Parameters of `in_place_min_bytes` or more (0: none) get no bucket (bucket_of -1).
// REQUIRES: bucket_bytes > 0.
BucketLayout plan_buckets(const std::vector<BucketParam>& params, size_t bucket_bytes,
                          size_t in_place_min_bytes = 0);

}  // namespace chorus::detail
