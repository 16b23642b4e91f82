// chorus for libtorch programs: what Horovod's horovod.torch is for Python.
//
//   chorus::init();                                          // from chorusrun, torchrun, ...
//   torch::optim::SGD sgd(model->parameters(), lr * chorus::size());
//   chorus::broadcast_parameters(*model, 0);                  // same start everywhere
//   chorus::DistributedOptimizer opt(sgd, model->named_parameters());
//   chorus::DistributedSampler sampler(dataset_size, chorus::size(), chorus::rank());
//   for each batch: opt.zero_grad(); loss.backward(); opt.step();
//   chorus::shutdown();
//
// Each part has its own header (the contracts are there); this one includes them all.
// docs/torch.md has the details and the measured figures.
#pragma once

#include "chorus/torch/batch_balancer.h"
#include "chorus/torch/broadcast.h"
#include "chorus/torch/optimizer.h"
#include "chorus/torch/runtime.h"
#include "chorus/torch/sampler.h"
#include "chorus/torch/tensor_ops.h"
