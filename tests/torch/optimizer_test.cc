// DistributedOptimizer and state broadcast: distributed gradients equal one process's on
// the concatenated batch, with even shares and with BatchBalancer's;
// backward_passes_per_step; fp16 error bound; sum and predivide; bit-identical replicas
// after steps; zero_grad to none or to zeros; a parameter without gradient on one rank; a
// sparse gradient as a clear error; Adasum (the delta optimizer); parameter and
// optimizer-state broadcast (SGD momentum, Adam).
// The optimizer's tests run on both of its paths: over TCP (each gradient reduced on its
// own, fused by the engine) and over shared memory (gradient buckets, param.grad() views
// into memory the ranks share, each bucket reduced in shared memory), with one bucket and
// with several.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "chorus/error.h"
#include "chorus/torch.h"
#include "torch_harness.h"

namespace chorus::torch_testing {
namespace {

using engine::testing::error_of;
using engine::testing::Transport;

// Hidden units of the MLP: 256 makes 2051 parameters, 8 KiB of gradients, over the 4 KiB
// from which the engine reduces in shared memory.
constexpr int64_t kHidden = 256;

struct Path {
  const char* name;
  Transport transport;
  size_t bucket_bytes;
};

void PrintTo(const Path& p, std::ostream* os) { *os << p.name; }

class DistributedOptimizerTest : public ::testing::TestWithParam<Path> {
 protected:
  DistributedOptimizerOptions on(Engine& e) const {
    DistributedOptimizerOptions o;
    o.engine = &e;
    o.bucket_bytes = GetParam().bucket_bytes;
    return o;
  }
  EngineGroup group(int n) const {
    return EngineGroup(n, engine::testing::test_options(), GetParam().transport);
  }
  bool buckets() const { return GetParam().transport == Transport::kShm; }
  // On the bucket path, reductions ran in shared memory.
  void expect_shared_memory(Engine& e) const {
    if (buckets()) {
      EXPECT_GT(e.stats().shared_memory, 0u);
    } else {
      EXPECT_EQ(e.stats().shared_memory, 0u);
    }
  }
};

INSTANTIATE_TEST_SUITE_P(
    Paths, DistributedOptimizerTest,
    ::testing::Values(Path{"tcp_each_gradient", Transport::kTcp, size_t{4} << 20},
                      Path{"shm_one_bucket", Transport::kShm, size_t{4} << 20},
                      Path{"shm_buckets_of_4k", Transport::kShm, 4096}),
    [](const ::testing::TestParamInfo<Path>& info) { return std::string(info.param.name); });

// Gradients of one process on rows [begin, end) after backward of the mean loss.
::torch::Tensor local_grads(int64_t begin, int64_t end) {
  auto m = make_mlp(kHidden);
  fill(*m, 0.25);
  loss_of(m, begin, end).backward();
  return flat_grads(*m);
}
::torch::Tensor reference_grads(int64_t rows) { return local_grads(0, rows); }

TEST_P(DistributedOptimizerTest, GradientsEqualOneProcessOnConcatenatedBatch) {
  const int n = 4, per_rank = 5;
  const ::torch::Tensor want = reference_grads(n * per_rank);
  EngineGroup g = group(n);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp(kHidden);
    fill(*m, 0.25);
    ::torch::optim::SGD sgd(m->parameters(), 0.1);
    DistributedOptimizer opt(sgd, m->named_parameters(), on(e));
    loss_of(m, r * per_rank, (r + 1) * per_rank).backward();
    opt.synchronize();
    auto got = flat_grads(*m);
    EXPECT_TRUE(got.allclose(want, 1e-5, 1e-6)) << (got - want).abs().max().item<float>();
    expect_shared_memory(e);
  });
}

// Uneven shares from BatchBalancer, each rank's loss scaled by its share's loss_scale: the
// averaged gradient is still that of the whole global batch, on the step after the split
// moved (rank 1 reported three times rank 0's time).
TEST_P(DistributedOptimizerTest, BalancedSharesAverageToTheGlobalBatchGradient) {
  const int64_t rows = 24;
  const ::torch::Tensor want = reference_grads(rows);
  EngineGroup g = group(2);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp(kHidden);
    fill(*m, 0.25);
    ::torch::optim::SGD sgd(m->parameters(), 0.0);  // the same weights at both steps
    DistributedOptimizer opt(sgd, m->named_parameters(), on(e));
    BatchBalancerOptions bo;
    bo.engine = &e;
    BatchBalancer balancer(bo);
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      const BatchShare s = balancer.next(rows);
      EXPECT_EQ(s.rows(), step == 0 ? 12 : (r == 0 ? 18 : 6)) << "step " << step;
      (loss_of(m, s.begin, s.end) * s.loss_scale).backward();
      balancer.record(r == 0 ? 0.1 : 0.3);
      opt.synchronize();
      auto got = flat_grads(*m);
      EXPECT_TRUE(got.allclose(want, 1e-5, 1e-6)) << (got - want).abs().max().item<float>();
      opt.step();
    }
  });
}

TEST_P(DistributedOptimizerTest, BackwardPassesPerStepAccumulatesLocally) {
  // Reference: the sum over two micro-batches of the gradient of each one's global mean.
  auto ref = make_mlp(kHidden);
  fill(*ref, 0.25);
  loss_of(ref, 0, 8).backward();
  loss_of(ref, 8, 16).backward();
  const ::torch::Tensor want = flat_grads(*ref);
  EngineGroup g = group(2);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp(kHidden);
    fill(*m, 0.25);
    ::torch::optim::SGD sgd(m->parameters(), 0.1);
    auto o = on(e);
    o.backward_passes_per_step = 2;
    DistributedOptimizer opt(sgd, m->named_parameters(), o);
    loss_of(m, r * 4, r * 4 + 4).backward();
    // Not reduced after the first of two passes: the gradient stays this rank's own.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_TRUE(flat_grads(*m).equal(local_grads(r * 4, r * 4 + 4)));
    loss_of(m, 8 + r * 4, 8 + r * 4 + 4).backward();
    opt.synchronize();
    EXPECT_TRUE(flat_grads(*m).allclose(want, 1e-5, 1e-6));
    opt.step();
    // A third pass without step() in between the next two is fine; a third before step is not.
    loss_of(m, 0, 4).backward();
    loss_of(m, 0, 4).backward();
    std::string err = error_of<std::exception>([&] { loss_of(m, 0, 4).backward(); });
    EXPECT_NE(err.find("more than backward_passes_per_step (2)"), std::string::npos) << err;
    opt.synchronize();
  });
}

TEST_P(DistributedOptimizerTest, Fp16CompressionWithinHalfPrecision) {
  const ::torch::Tensor g0 = local_grads(0, 4), g1 = local_grads(4, 8);
  const ::torch::Tensor want = (g0 + g1) / 2;
  // Each rank's gradient is rounded to float16 (relative error 2^-11), the float32 sum of
  // the two is rounded to float16 again: |error| <= (|g0| + |g1|) / 2 * 2^-11 +
  // |mean| * 2^-11, plus float16's absolute step near zero (2^-24) and float32 noise.
  const ::torch::Tensor bound = ((g0.abs() + g1.abs()) / 2 + want.abs()).mul(1.01 / 2048).add(1e-7);
  EngineGroup g = group(2);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp(kHidden);
    fill(*m, 0.25);
    ::torch::optim::SGD sgd(m->parameters(), 0.1);
    auto o = on(e);
    o.fp16_compression = true;
    DistributedOptimizer opt(sgd, m->named_parameters(), o);
    loss_of(m, r * 4, r * 4 + 4).backward();
    opt.synchronize();
    auto got = flat_grads(*m);
    EXPECT_EQ(got.scalar_type(), ::torch::kFloat32);
    auto err = (got - want).abs();
    EXPECT_TRUE(err.le(bound).all().item<bool>())
        << "worst excess " << (err - bound).max().item<float>();
    EXPECT_GT(err.max().item<float>(), 0.f) << "float16 rounding should be visible";
    EXPECT_LT(err.max().item<float>(), want.abs().max().item<float>() * 2e-3);
  });
}

TEST_P(DistributedOptimizerTest, SumAndPredivideFactor) {
  const ::torch::Tensor mean = reference_grads(8);
  EngineGroup g = group(2);
  g.run([&](int r, Engine& e) {
    for (int variant = 0; variant < 2; ++variant) {
      auto m = make_mlp(kHidden);
      fill(*m, 0.25);
      ::torch::optim::SGD sgd(m->parameters(), 0.1);
      auto o = on(e);
      if (variant == 0) o.op = ReduceOp::kSum;
      if (variant == 1) o.gradient_predivide_factor = 4.0;
      o.name_prefix = "v" + std::to_string(variant) + "/";
      DistributedOptimizer opt(sgd, m->named_parameters(), o);
      loss_of(m, r * 4, r * 4 + 4).backward();
      opt.synchronize();
      auto want = variant == 0 ? mean * 2 : mean;
      EXPECT_TRUE(flat_grads(*m).allclose(want, 1e-5, 1e-6)) << variant;
    }
  });
}

TEST_P(DistributedOptimizerTest, ReplicasBitIdenticalAfterEveryStep) {
  EngineGroup g = group(3);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp(kHidden);
    fill(*m, 0.25);
    ::torch::optim::SGD sgd(m->parameters(), ::torch::optim::SGDOptions(0.3).momentum(0.9));
    DistributedOptimizer opt(sgd, m->named_parameters(), on(e));
    CollectiveOptions o;
    o.engine = &e;
    for (int step = 0; step < 6; ++step) {
      opt.zero_grad();
      loss_of(m, (step * 3 + r) * 3, (step * 3 + r) * 3 + 3).backward();
      opt.step();
      if (buckets()) {  // the gradients stay where the ranks share them
        for (const auto& p : m->parameters()) {
          ASSERT_TRUE(g.comm(r).in_shared_memory(p.grad().data_ptr(), p.grad().nbytes()));
        }
      }
      auto mine = flat_params(*m);
      auto all = allgather(mine.unsqueeze(0), "check/" + std::to_string(step), o);
      for (int k = 0; k < 3; ++k) {
        ASSERT_EQ(std::memcmp(all[k].data_ptr(), mine.data_ptr(), mine.numel() * 4), 0)
            << "rank " << k << " differs from rank " << r << " after step " << step;
      }
    }
  });
}

// Adasum, Horovod's delta optimizer: each rank steps on its own rows with its own momentum,
// and each parameter becomes its start plus the Adasum of the ranks' changes, the same
// bits on every rank. The reference replays both ranks' replicas and optimizers here.
TEST(AdasumOptimizer, ParametersMoveByTheAdasumOfTheRanksSteps) {
  const int steps = 3, rows = 5;
  auto rows_of = [&](int step, int r) { return (step * 2 + r) * rows; };
  auto sgd_options = ::torch::optim::SGDOptions(0.2).momentum(0.9);
  std::vector<::torch::nn::Sequential> replica;
  std::vector<std::unique_ptr<::torch::optim::SGD>> replica_sgd;
  for (int r = 0; r < 2; ++r) {
    replica.push_back(make_mlp(kHidden));
    fill(*replica[r], 0.25);
    replica_sgd.push_back(
        std::make_unique<::torch::optim::SGD>(replica[r]->parameters(), sgd_options));
  }
  std::vector<::torch::Tensor> current;
  for (const auto& p : replica[0]->parameters()) current.push_back(p.detach().to(::torch::kDouble));
  std::vector<::torch::Tensor> want;  // the flat parameters after each step
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<::torch::Tensor>> change(2);
    for (int r = 0; r < 2; ++r) {
      ::torch::NoGradGuard no_grad;
      auto params = replica[r]->parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(current[i]);
    }
    for (int r = 0; r < 2; ++r) {
      replica_sgd[r]->zero_grad();
      loss_of(replica[r], rows_of(step, r), rows_of(step, r) + rows).backward();
      replica_sgd[r]->step();
      auto params = replica[r]->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        change[r].push_back(params[i].detach().to(::torch::kDouble) - current[i]);
      }
    }
    std::vector<::torch::Tensor> flat;
    for (size_t i = 0; i < current.size(); ++i) {
      const auto &a = change[0][i], &b = change[1][i];
      const double ab = a.mul(b).sum().item<double>(), aa = a.mul(a).sum().item<double>(),
                   bb = b.mul(b).sum().item<double>();
      current[i] = current[i] + a * (1 - ab / (2 * aa)) + b * (1 - ab / (2 * bb));
      flat.push_back(current[i].reshape(-1));
    }
    want.push_back(::torch::cat(flat));
  }
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp(kHidden);
    fill(*m, 0.25);
    ::torch::optim::SGD sgd(m->parameters(), sgd_options);
    DistributedOptimizerOptions o;
    o.engine = &e;
    o.op = ReduceOp::kAdasum;
    CollectiveOptions c;
    c.engine = &e;
    {
      DistributedOptimizer opt(sgd, m->named_parameters(), o);
      for (int step = 0; step < steps; ++step) {
        opt.zero_grad();
        loss_of(m, rows_of(step, r), rows_of(step, r) + rows).backward();
        opt.step();
        auto mine = flat_params(*m);
        EXPECT_TRUE(mine.to(::torch::kDouble).allclose(want[step], 1e-5, 1e-6)) << step;
        auto all = allgather(mine.unsqueeze(0), "check/" + std::to_string(step), c);
        ASSERT_TRUE(all[0].equal(all[1])) << "replicas differ after step " << step;
      }
    }
    // Dropped between backward and step: every parameter is as it was before its local
    // step, not its change.
    const auto before = flat_params(*m);
    {
      DistributedOptimizer dropped(sgd, m->named_parameters(), o);
      dropped.zero_grad();
      loss_of(m, 0, rows).backward();
    }
    EXPECT_TRUE(flat_params(*m).equal(before));
  });
  EngineGroup three(3);
  three.run([&](int, Engine& e) {
    auto m = make_mlp(kHidden);
    ::torch::optim::SGD sgd(m->parameters(), sgd_options);
    DistributedOptimizerOptions o;
    o.engine = &e;
    o.op = ReduceOp::kAdasum;
    EXPECT_NE(error_of<InvalidArgument>([&] { DistributedOptimizer opt(sgd, o); })
                  .find("Adasum needs a power-of-two number of ranks (it combines them "
                        "pairwise), not 3"),
              std::string::npos);
  });
}

// Two heads; rank 1 never uses head "b": its gradient is missing there.
struct TwoHeads : ::torch::nn::Module {
  TwoHeads() {
    a = register_module("a", ::torch::nn::Linear(4, 300));
    b = register_module("b", ::torch::nn::Linear(4, 300));
  }
  ::torch::nn::Linear a{nullptr}, b{nullptr};
};

TEST_P(DistributedOptimizerTest, ParameterWithoutGradientOnOneRankDoesNotHang) {
  EngineGroup g = group(2);
  g.run([&](int r, Engine& e) {
    auto m = std::make_shared<TwoHeads>();
    fill(*m, 0.5);
    ::torch::optim::SGD sgd(m->parameters(), 0.1);
    DistributedOptimizer opt(sgd, m->named_parameters(), on(e));
    auto x = inputs(0, 4);
    auto out = m->a->forward(x);
    if (r == 0) out = out + m->b->forward(x);
    out.sum().backward();
    opt.step();  // would hang if rank 1 never submitted grad/b.weight
    // Rank 1 contributed zeros: b's gradient is half of rank 0's.
    auto want = ::torch::ones({4, 300}).t().matmul(x).div(2);
    EXPECT_TRUE(m->b->weight.grad().allclose(want, 1e-5, 1e-6));
    auto flat = flat_params(*m);
    CollectiveOptions o;
    o.engine = &e;
    auto all = allgather(flat.unsqueeze(0), "check", o);
    EXPECT_TRUE(all[0].equal(all[1]));
    expect_shared_memory(e);
  });
}

// A sparse gradient (an embedding's) is not reduced in C++: a clear error on every rank, and
// the dense gradients beside it are reduced all the same (no rank waits for another).
TEST_P(DistributedOptimizerTest, SparseGradientIsAClearError) {
  EngineGroup g = group(2);
  g.run([&](int /*rank*/, Engine& e) {
    auto emb = ::torch::nn::Embedding(::torch::nn::EmbeddingOptions(10, 3).sparse(true));
    auto head = ::torch::nn::Linear(3, 1);
    std::vector<at::Tensor> params = emb->parameters();
    for (const auto& p : head->parameters()) params.push_back(p);
    ::torch::optim::SGD sgd(params, 0.1);
    DistributedOptimizer opt(sgd, on(e));
    head->forward(emb->forward(::torch::arange(4))).sum().backward();
    EXPECT_TRUE(emb->weight.grad().is_sparse());
    std::string err = error_of<InvalidArgument>([&] { opt.synchronize(); });
    EXPECT_NE(err.find("sparse gradients are not supported"), std::string::npos) << err;
    EXPECT_EQ(head->bias.grad().item<float>(), 4.0f);  // the average of 4 and 4
  });
}

// Gradients that autograd puts somewhere new — after they were set to none, or replaced
// by the caller — are reduced all the same (on the bucket path: copied into the bucket).
TEST_P(DistributedOptimizerTest, GradientsSetToNoneOrReplacedAreReducedAllTheSame) {
  const ::torch::Tensor want = reference_grads(8);
  EngineGroup g = group(2);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp(kHidden);
    fill(*m, 0.25);
    ::torch::optim::SGD sgd(m->parameters(), 0.0);  // lr 0: the same weights every step
    DistributedOptimizer opt(sgd, m->named_parameters(), on(e));
    for (int step = 0; step < 3; ++step) {
      auto params = m->parameters();
      if (step == 1) {
        for (auto& p : params) p.mutable_grad() = ::torch::Tensor();
      } else if (step == 2) {
        params[0].mutable_grad() = ::torch::zeros_like(params[0]);
        for (size_t i = 1; i < params.size(); ++i) params[i].mutable_grad().zero_();
      } else {
        opt.zero_grad();
      }
      loss_of(m, r * 4, r * 4 + 4).backward();
      opt.step();
      auto got = flat_grads(*m);
      EXPECT_TRUE(got.allclose(want, 1e-5, 1e-6))
          << "step " << step << ": " << (got - want).abs().max().item<float>();
    }
    expect_shared_memory(e);
  });
}

// zero_grad() leaves every gradient undefined; zero_grad(false) zeros them where they are
// (on the bucket path: in the shared memory). Either way, the same training, bit for bit.
TEST_P(DistributedOptimizerTest, ZeroGradToNoneOrToZerosTrainsBitIdentically) {
  EngineGroup g = group(2);
  g.run([&](int r, Engine& e) {
    std::vector<::torch::Tensor> trained;
    for (bool set_to_none : {true, false}) {
      auto m = make_mlp(kHidden);
      fill(*m, 0.25);
      ::torch::optim::SGD sgd(m->parameters(), ::torch::optim::SGDOptions(0.3).momentum(0.9));
      DistributedOptimizerOptions o = on(e);
      o.name_prefix = set_to_none ? "none/" : "zeros/";
      DistributedOptimizer opt(sgd, m->named_parameters(), o);
      for (int step = 0; step < 4; ++step) {
        opt.zero_grad(set_to_none);
        for (const auto& p : m->parameters()) {
          if (set_to_none) {
            ASSERT_FALSE(p.grad().defined()) << "step " << step;
          } else if (step > 0) {
            ASSERT_EQ(p.grad().count_nonzero().item<int64_t>(), 0) << "step " << step;
            if (buckets()) {
              ASSERT_TRUE(g.comm(r).in_shared_memory(p.grad().data_ptr(), p.grad().nbytes()));
            }
          }
        }
        loss_of(m, (step * 2 + r) * 3, (step * 2 + r) * 3 + 3).backward();
        opt.step();
      }
      trained.push_back(flat_params(*m));
    }
    ASSERT_EQ(std::memcmp(trained[0].data_ptr(), trained[1].data_ptr(), trained[0].nbytes()), 0);
    expect_shared_memory(e);
  });
}

TEST(Broadcast, ParametersMakeDifferentReplicasIdentical) {
  EngineGroup g(3);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp();
    fill(*m, 10.0 * r);  // different on every rank
    broadcast_parameters(*m, 1, &e);
    auto want = make_mlp();
    fill(*want, 10.0);
    EXPECT_TRUE(flat_params(*m).equal(flat_params(*want)));
    EXPECT_TRUE(m->parameters()[0].requires_grad());
  });
}

// The state tensors of parameter p (Adam's step as a tensor).
std::vector<::torch::Tensor> state_of(::torch::optim::SGD& opt, const ::torch::Tensor& p) {
  auto& s = static_cast<::torch::optim::SGDParamState&>(
      *opt.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
  return {s.momentum_buffer()};
}
std::vector<::torch::Tensor> state_of(::torch::optim::Adam& opt, const ::torch::Tensor& p) {
  auto& s = static_cast<::torch::optim::AdamParamState&>(
      *opt.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
  return {s.exp_avg(), s.exp_avg_sq(), ::torch::tensor({s.step()}).to(::torch::kFloat32)};
}

// Steps the optimizer locally (no reduction) on rank-dependent data so states differ, then
// broadcasts root's state and compares every state tensor with root's through allgather.
template <typename Opt, typename Options>
void check_state_broadcast(Options options) {
  EngineGroup g(2);
  g.run([&](int r, Engine& e) {
    auto m = make_mlp();
    fill(*m, 0.25);
    Opt opt(m->parameters(), options);
    for (int s = 0; s <= r; ++s) {  // rank 1 takes one more step: different Adam step count
      opt.zero_grad();
      loss_of(m, r * 8 + s, r * 8 + s + 4).backward();
      opt.step();
    }
    CollectiveOptions o;
    o.engine = &e;
    int differed = 0;
    auto params = m->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      auto before = state_of(opt, params[i]);
      for (size_t k = 0; k < before.size(); ++k) {
        auto all = allgather(before[k].unsqueeze(0), "pre/" + std::to_string(i * 8 + k), o);
        differed += !all[0].equal(all[1]);
      }
    }
    EXPECT_GT(differed, 0) << "the test needs different states before the broadcast";
    broadcast_optimizer_state(opt, 0, &e);
    ASSERT_EQ(opt.state().size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      auto after = state_of(opt, params[i]);
      for (size_t k = 0; k < after.size(); ++k) {
        auto all = allgather(after[k].unsqueeze(0), "post/" + std::to_string(i * 8 + k), o);
        EXPECT_TRUE(all[0].equal(all[1])) << "parameter " << i << " state field " << k;
      }
    }
  });
}

TEST(Broadcast, OptimizerStateSgdMomentum) {
  check_state_broadcast<::torch::optim::SGD>(::torch::optim::SGDOptions(0.1).momentum(0.9));
}

TEST(Broadcast, OptimizerStateAdam) {
  check_state_broadcast<::torch::optim::Adam>(::torch::optim::AdamOptions(0.01));
}

}  // namespace
}  // namespace chorus::torch_testing
