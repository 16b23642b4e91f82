#include "chorus/train/metrics.h"

#include <ATen/ATen.h>

#include "chorus/error.h"

namespace chorus {

namespace losses {

LossFn sparse_categorical_crossentropy() {
  return [](const at::Tensor& output, const at::Tensor& target) {
    CHORUS_CHECK_ARG(output.dim() == 2 && target.dim() == 1 && output.size(0) == target.size(0),
                     "sparse_categorical_crossentropy: expects logits [N, C] and targets [N], got ",
                     output.sizes(), " and ", target.sizes());
    return at::nll_loss(at::log_softmax(output, 1), target.to(at::kLong), {}, at::Reduction::None);
  };
}

LossFn mean_squared_error() {
  return [](const at::Tensor& output, const at::Tensor& target) {
    CHORUS_CHECK_ARG(output.sizes() == target.sizes(), "mean_squared_error: output ",
                     output.sizes(), " and target ", target.sizes(), " differ in shape");
    at::Tensor sq = (output - target).pow(2);
    return sq.dim() <= 1 ? sq : sq.flatten(1).mean(1);
  };
}

}  // namespace losses

namespace metrics {
namespace {

class SparseCategoricalAccuracy : public Metric {
 public:
  std::string name() const override { return "accuracy"; }
  size_t num_sums() const override { return 2; }
  std::vector<double> batch_sums(const at::Tensor& output,
                                 const at::Tensor& target) const override {
    const auto correct = output.argmax(1).eq(target.to(at::kLong)).sum().item<int64_t>();
    return {static_cast<double>(correct), static_cast<double>(target.size(0))};
  }
  double result(const std::vector<double>& totals) const override {
    return totals.at(1) > 0 ? totals.at(0) / totals.at(1) : 0.0;
  }
};

}  // namespace

std::shared_ptr<Metric> sparse_categorical_accuracy() {
  return std::make_shared<SparseCategoricalAccuracy>();
}

}  // namespace metrics
}  // namespace chorus
