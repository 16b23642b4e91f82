// Broadcast of parameters, optimizer state and bytes (include/chorus/torch/broadcast.h).
#include "chorus/torch/broadcast.h"

#include <ATen/core/grad_mode.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>
#include <vector>

#include "chorus/error.h"
#include "chorus/torch/runtime.h"
#include "chorus/torch/tensor_ops.h"

namespace chorus {

void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors,
                          int root, Engine* engine, const std::string& prefix) {
  Engine& e = detail::engine_or_default(engine);
  CollectiveOptions o;
  o.engine = &e;
  // In place on the parameters themselves: autograd must not record it, and a leaf that
  // requires grad may not be modified in place while recording.
  at::NoGradGuard no_grad;
  std::vector<TensorHandle> handles;
  handles.reserve(named_tensors.size());
  for (const auto& item : named_tensors) {
    at::Tensor t = item.value();
    handles.push_back(broadcast_async_(t, root, prefix + item.key(), o));
  }
  for (auto& h : handles) h.wait();
}

void broadcast_parameters(const ::torch::nn::Module& module, int root, Engine* engine) {
  broadcast_parameters(module.named_parameters(/*recurse=*/true), root, engine, "bcast/param/");
  broadcast_parameters(module.named_buffers(/*recurse=*/true), root, engine, "bcast/buffer/");
}

void broadcast_bytes(std::string& bytes, int root, const std::string& name, Engine* engine) {
  Engine& e = detail::engine_or_default(engine);
  int64_t length = static_cast<int64_t>(bytes.size());
  e.broadcast(name + "/length", &length, DataType::kInt64, {1}, root).wait();
  CHORUS_CHECK_ARG(length >= 0, "broadcast_bytes '", name, "': negative length ", length);
  if (e.rank() != root) bytes.resize(static_cast<size_t>(length));
  e.broadcast(name + "/bytes", bytes.data(), DataType::kUInt8, {length}, root).wait();
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root, Engine* engine,
                               const std::string& name) {
  Engine& e = detail::engine_or_default(engine);
  std::string bytes;
  if (e.rank() == root) {
    ::torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  broadcast_bytes(bytes, root, name, &e);
  if (e.rank() == root) return;
  ::torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  // load() only adds the root's entries: drop ours first so "no state" is copied too.
  optimizer.state().clear();
  at::NoGradGuard no_grad;
  optimizer.load(archive);
}

}  // namespace chorus
