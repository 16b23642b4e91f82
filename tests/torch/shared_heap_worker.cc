// A rank of shared_heap_test.cc's jobs, run under chorusrun: checks the shared heap
// (src/torch/shared_heap.h) from inside a real training process and prints
// "<mode> ok rank <r>" when every check held (a failed check exits 1 with a message).
//   heap      tensors are born in shared memory; an allreduce of one runs there; the
//             DistributedOptimizer reduces a large gradient where autograd put it, and the
//             replicas equal one process trained on the whole batch
//   shutdown  a tensor in the heap outlives shutdown(); init() again makes a new heap
//   fork      a forked child's tensors and writes stay in the child
//   off       CHORUS_SHARED_HEAP=0: no heap
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "chorus/job.h"
#include "chorus/torch.h"
#include "torch/shared_heap.h"

namespace {

#define EXPECT_OR_EXIT(cond)                                                                   \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "rank %d: check failed at line %d: %s\n", chorus::rank(), __LINE__, \
                   #cond);                                                                     \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

bool in_heap(const at::Tensor& t) {
  return chorus::detail::job().world().in_shared_memory(t.data_ptr(), t.nbytes());
}

// 1 MiB of floats: a tensor the heap takes.
at::Tensor big(float value) { return torch::full({1 << 18}, value); }

void heap() {
  EXPECT_OR_EXIT(chorus::detail::shared_heap_active());
  at::Tensor t = big(static_cast<float>(chorus::rank() + 1));
  EXPECT_OR_EXIT(in_heap(t));
  EXPECT_OR_EXIT(!in_heap(torch::ones({100})));  // below kSharedHeapMinBytes
  const uint64_t before = chorus::default_engine().stats().shared_memory;
  chorus::CollectiveOptions sum;
  sum.op = chorus::ReduceOp::kSum;
  chorus::allreduce_(t, "heap.sum", sum);
  EXPECT_OR_EXIT(chorus::default_engine().stats().shared_memory == before + 1);
  EXPECT_OR_EXIT(t.eq(3.0).all().item<bool>());

  // Linear(512, 600): a 1.2 MB weight, reduced where autograd puts its gradient; the bias
  // and the small layer go to a bucket.
  auto make = [] {
    torch::manual_seed(5);
    return torch::nn::Sequential(torch::nn::Linear(512, 600), torch::nn::ReLU(),
                                 torch::nn::Linear(600, 3));
  };
  auto model = make(), reference = make();
  torch::optim::SGD sgd(model->parameters(), 0.1), ref_sgd(reference->parameters(), 0.1);
  chorus::DistributedOptimizer opt(sgd, model->named_parameters());
  const int64_t rows = 8, r = chorus::rank(), n = chorus::size();
  auto inputs = torch::arange(n * rows * 512, torch::kFloat32).mul(0.013).sin().view({-1, 512});
  auto labels = torch::arange(n * rows, torch::kInt64).remainder(3);
  for (int step = 0; step < 3; ++step) {
    // Read before backward: its hooks may start (and finish) the allreduces before step().
    const uint64_t shared_before = chorus::default_engine().stats().shared_memory;
    opt.zero_grad();
    auto mine = torch::nn::functional::cross_entropy(
        model->forward(inputs.slice(0, r * rows, (r + 1) * rows)),
        labels.slice(0, r * rows, (r + 1) * rows));
    mine.backward();
    const at::Tensor weight_grad = model->parameters()[0].grad();
    EXPECT_OR_EXIT(in_heap(weight_grad));
    opt.step();
    EXPECT_OR_EXIT(model->parameters()[0].grad().data_ptr() ==
                   weight_grad.data_ptr());  // no bucket
    EXPECT_OR_EXIT(chorus::default_engine().stats().shared_memory ==
                   shared_before + 2);  // weight, bucket
    ref_sgd.zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(inputs), labels).backward();
    ref_sgd.step();
  }
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    EXPECT_OR_EXIT(torch::allclose(model->parameters()[i], reference->parameters()[i], 1e-4, 1e-6));
  }
  // Bit-identical replicas: the max and the min over ranks are this rank's values.
  for (auto& p : model->parameters()) {
    chorus::CollectiveOptions max, min;
    max.op = chorus::ReduceOp::kMax;
    min.op = chorus::ReduceOp::kMin;
    EXPECT_OR_EXIT(chorus::allreduce(p.detach(), "", max).equal(p.detach()));
    EXPECT_OR_EXIT(chorus::allreduce(p.detach(), "", min).equal(p.detach()));
  }
}

void shutdown_and_again() {
  at::Tensor kept = big(7);
  EXPECT_OR_EXIT(in_heap(kept));
  chorus::shutdown();
  EXPECT_OR_EXIT(!chorus::detail::shared_heap_active());
  EXPECT_OR_EXIT(kept.eq(7).all().item<bool>());
  kept.add_(1);
  EXPECT_OR_EXIT(kept.eq(8).all().item<bool>());
  at::Tensor between = big(1);  // from the allocator before
  chorus::init();
  EXPECT_OR_EXIT(chorus::detail::shared_heap_active());
  EXPECT_OR_EXIT(!in_heap(kept) && !in_heap(between));
  at::Tensor t = big(static_cast<float>(chorus::rank()));
  EXPECT_OR_EXIT(in_heap(t));
  chorus::CollectiveOptions sum;
  sum.op = chorus::ReduceOp::kSum;
  chorus::allreduce_(t, "again.sum", sum);
  EXPECT_OR_EXIT(t.eq(1).all().item<bool>());
  kept.reset();  // the first heap's last tensor: its memory goes
  between.reset();
}

void fork_child() {
  at::Tensor t = big(1);
  EXPECT_OR_EXIT(in_heap(t));
  pid_t child = ::fork();
  EXPECT_OR_EXIT(child >= 0);
  if (child == 0) {
    int failed = !t.eq(1).all().item<bool>() ? 1 : chorus::detail::shared_heap_active() ? 2 : 0;
    t.fill_(5);  // the child's own copy from here on
    at::Tensor fresh = big(2);
    if (failed == 0 && !t.eq(5).all().item<bool>()) failed = 3;
    if (failed == 0 && !fresh.eq(2).all().item<bool>()) failed = 4;
    ::_exit(failed);
  }
  int status = 0;
  EXPECT_OR_EXIT(::waitpid(child, &status, 0) == child);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "child: status %d\n", status);
  }
  EXPECT_OR_EXIT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_OR_EXIT(t.eq(1).all().item<bool>());
  chorus::CollectiveOptions sum;
  sum.op = chorus::ReduceOp::kSum;
  chorus::allreduce_(t, "fork.sum", sum);  // still in shared memory after the fork
  EXPECT_OR_EXIT(t.eq(2).all().item<bool>());
}

void off() {
  EXPECT_OR_EXIT(!chorus::detail::shared_heap_active());
  EXPECT_OR_EXIT(!in_heap(big(1)));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  torch::set_num_threads(1);
  chorus::init();
  if (mode == "heap") {
    heap();
  } else if (mode == "shutdown") {
    shutdown_and_again();
  } else if (mode == "fork") {
    fork_child();
  } else if (mode == "off") {
    off();
  } else {
    std::fprintf(stderr, "usage: shared_heap_worker heap|shutdown|fork|off\n");
    return 2;
  }
  std::printf("%s ok rank %d\n", mode.c_str(), chorus::rank());
  std::fflush(stdout);
  chorus::shutdown();
  return 0;
}
