#include "torch/gradient_buckets.h"

namespace chorus::detail {
namespace {

constexpr size_t kAlign = 64;  // a cache line: the reduction's vector loads stay aligned

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

BucketLayout plan_buckets(const std::vector<BucketParam>& params, size_t bucket_bytes,
                          size_t in_place_min_bytes) {
  BucketLayout layout;
  layout.bucket_of.assign(params.size(), -1);
  layout.offset_of.assign(params.size(), 0);
  BucketLayout::Bucket* open = nullptr;
  for (size_t k = params.size(); k-- > 0;) {
    const size_t bytes = params[k].bytes;
    if (in_place_min_bytes > 0 && bytes >= in_place_min_bytes) continue;
    const bool fits = open != nullptr && open->dtype == params[k].dtype &&
                      align_up(open->bytes) + bytes <= bucket_bytes;
    if (!fits) {
      layout.total_bytes = align_up(layout.total_bytes);
      layout.buckets.emplace_back();
      open = &layout.buckets.back();
      open->offset = layout.total_bytes;
      open->dtype = params[k].dtype;
    }
    const size_t at = align_up(open->bytes);
    open->params.push_back(k);
    open->bytes = at + bytes;
    layout.bucket_of[k] = static_cast<int>(layout.buckets.size() - 1);
    layout.offset_of[k] = open->offset + at;
    layout.total_bytes = open->offset + open->bytes;
  }
  return layout;
}

}  // namespace chorus::detail
