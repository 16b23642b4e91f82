// Losses and metrics for Trainer (Keras' compile(loss=..., metrics=[...])).
//
// A loss returns one value per example (reduction "none"); the trainer turns it into each
// replica's share of the global mean (compute_average_loss).
//
// A metric is stateless: for one replica's batch it returns sums (e.g. {correct, count});
// the trainer adds them over steps, replicas and workers, and result() turns the totals
// into the value (e.g. correct / count). Sums make the cross-replica aggregation exact.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace chorus {

using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

namespace losses {
// output: logits [N, C]; target: int64 class indices [N].
LossFn sparse_categorical_crossentropy();
// output and target of the same shape [N, ...]; mean over the non-batch dimensions.
LossFn mean_squared_error();
}  // namespace losses

class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;
  // How many sums batch_sums() returns.
  virtual size_t num_sums() const = 0;
  // Sums for one batch (num_sums() of them). Called concurrently from replica threads.
  virtual std::vector<double> batch_sums(const at::Tensor& output,
                                         const at::Tensor& target) const = 0;
  virtual double result(const std::vector<double>& totals) const = 0;
};

namespace metrics {
// Fraction of rows whose argmax(output) equals the int64 target. Named "accuracy".
std::shared_ptr<Metric> sparse_categorical_accuracy();
}  // namespace metrics

}  // namespace chorus
