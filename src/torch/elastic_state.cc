#include "chorus/torch/elastic_state.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>

#include "chorus/torch/broadcast.h"

namespace chorus::elastic {
namespace {

std::string serialize(::torch::optim::Optimizer& optimizer) {
  ::torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void deserialize(::torch::optim::Optimizer& optimizer, const std::string& bytes) {
  ::torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  optimizer.state().clear();  // load() only adds entries: "no state" must come back too
  at::NoGradGuard no_grad;
  optimizer.load(archive);
}

std::string encode(const std::map<std::string, int64_t>& values) {
  std::string text;
  for (const auto& [name, value] : values) text += name + "=" + std::to_string(value) + "\n";
  return text;
}

std::map<std::string, int64_t> decode(const std::string& text) {
  std::map<std::string, int64_t> values;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.rfind('=');
    CHORUS_CHECK_ARG(eq != std::string::npos, "TorchState: malformed value line '", line, "'");
    values[line.substr(0, eq)] = std::stoll(line.substr(eq + 1));
  }
  return values;
}

}  // namespace

TorchState::TorchState(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer)
    : model_(model), optimizer_(optimizer) {
  save();
}

std::vector<at::Tensor> TorchState::tensors() const {
  std::vector<at::Tensor> all;
  for (const auto& p : model_.parameters(/*recurse=*/true)) all.push_back(p);
  for (const auto& b : model_.buffers(/*recurse=*/true)) all.push_back(b);
  return all;
}

void TorchState::save() {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> live = tensors();
  if (saved_tensors_.size() != live.size()) {
    saved_tensors_.clear();
    for (const at::Tensor& t : live) saved_tensors_.push_back(t.detach().clone());
  } else {
    for (size_t i = 0; i < live.size(); ++i) saved_tensors_[i].copy_(live[i]);
  }
  saved_optimizer_ = serialize(optimizer_);
  saved_values_ = values_;
}

void TorchState::load() {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> live = tensors();
  CHORUS_CHECK_ARG(live.size() == saved_tensors_.size(), "TorchState: the model has ", live.size(),
                   " tensors, the saved state ", saved_tensors_.size());
  for (size_t i = 0; i < live.size(); ++i) live[i].copy_(saved_tensors_[i]);
  deserialize(optimizer_, saved_optimizer_);
  values_ = saved_values_;
}

void TorchState::broadcast_from(int root) {
  broadcast_parameters(model_, root);
  broadcast_optimizer_state(optimizer_, root, nullptr, "elastic.optimizer_state");
  std::string values = encode(values_);
  broadcast_bytes(values, root, "elastic.values");
  values_ = decode(values);
  save();
}

}  // namespace chorus::elastic
