// ParameterServerStrategy with every task as a thread of this process (real ps servers,
// coordinator and workers over loopback TCP). References: DefaultStrategy with the same
// model, data and torch optimizer (one asynchronous worker must follow it exactly, since
// the ps runs torch's arithmetic), and the strategy's own saved state.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include "chorus/ps/client.h"
#include "process_harness.h"
#include "train_harness.h"

namespace chorus {
namespace {

using namespace train_testing;

constexpr int64_t kRows = 256;
constexpr int64_t kGlobalBatch = 32;  // 8 steps per epoch

// Unshuffled, so a worker's repeat() yields the same batches as the reference's epochs.
Dataset training_data() { return classification_data(kRows).batch(kGlobalBatch); }

std::string local_address() { return "127.0.0.1:" + std::to_string(test::free_port()); }

using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(ReplicatedModel&)>;

OptimizerFactory sgd(double lr, double momentum) {
  return [=](ReplicatedModel& m) {
    return std::make_unique<torch::optim::SGD>(m.parameters(),
                                               torch::optim::SGDOptions(lr).momentum(momentum));
  };
}

OptimizerFactory adam(double lr) {
  return [=](ReplicatedModel& m) {
    return std::make_unique<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(lr));
  };
}

FitOptions quiet(int epochs) {
  FitOptions o;
  o.epochs = epochs;
  o.verbose = 0;
  return o;
}

struct Outcome {
  History history;
  at::Tensor params;
};

Outcome fit_with(Strategy& strategy, const OptimizerFactory& make_optimizer, FitOptions options) {
  ReplicatedModel model = strategy.make_model(mlp_factory());
  auto optimizer = make_optimizer(model);
  Trainer trainer(strategy, model, *optimizer, losses::sparse_categorical_crossentropy(),
                  {metrics::sparse_categorical_accuracy()});
  Outcome out;
  out.history = trainer.fit(training_data(), std::move(options));
  if (strategy.is_chief()) strategy.refresh_model(model);
  out.params = torch_testing::flat_params(model.module()).clone();
  return out;
}

// A chief, `workers` workers and `num_ps` ps tasks as threads; `chief_body` runs on the
// chief's strategy, `worker_body` on each worker's.
struct LocalCluster {
  LocalCluster(int workers, int num_ps) {
    spec.chief = local_address();
    for (int i = 0; i < workers; ++i) spec.workers.push_back(local_address());
    for (int i = 0; i < num_ps; ++i) spec.ps.push_back(local_address());
  }

  ps::ClusterSpec task(ps::Role role, int index) const {
    ps::ClusterSpec s = spec;
    s.role = role;
    s.task_index = index;
    return s;
  }

  void run(ParameterServerStrategy::Options options,
           const std::function<void(ParameterServerStrategy&)>& chief_body,
           const std::function<void(ParameterServerStrategy&)>& worker_body) {
    options.exit_after_serving = false;
    options.timeout = std::chrono::seconds(60);
    std::vector<std::thread> threads;
    for (int i = 0; i < spec.num_ps(); ++i) {
      threads.emplace_back([=] {
        try {
          ParameterServerStrategy serve(task(ps::Role::kPs, i), secret, options);
        } catch (const std::exception& e) {
          record(ps_errors, e);
        }
      });
    }
    for (int i = 0; i < spec.num_workers(); ++i) {
      threads.emplace_back([=] {
        try {
          ParameterServerStrategy worker(task(ps::Role::kWorker, i), secret, options);
          worker_body(worker);
        } catch (const std::exception& e) {
          record(worker_errors, e);
        }
      });
    }
    try {
      ParameterServerStrategy chief(task(ps::Role::kChief, 0), secret, options);
      chief_body(chief);
    } catch (const std::exception& e) {  // the destructor ends the workers and ps tasks...
      ADD_FAILURE() << "the chief threw: " << e.what();
      try {  // ... unless the chief never came up: end the ps tasks as it would have
        ps::PsClient(spec.ps, secret).shutdown_servers();
      } catch (const std::exception&) {
      }
    }
    for (auto& t : threads) t.join();  // workers without a chief give up at the timeout
    EXPECT_TRUE(ps_errors.empty()) << ps_errors.front();
  }

  void record(std::vector<std::string>& errors, const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back(e.what());
  }

  ps::ClusterSpec spec;
  Secret secret = Secret::generate();
  std::mutex mu;
  std::vector<std::string> worker_errors;  // what workers threw
  std::vector<std::string> ps_errors;      // what ps tasks threw
};

void expect_follows_default_strategy(const OptimizerFactory& optimizer, int num_ps,
                                     ps::UpdateMode mode = ps::UpdateMode::kAsync) {
  DefaultStrategy one;
  Outcome reference = fit_with(one, optimizer, quiet(3));
  LocalCluster cluster(1, num_ps);
  Outcome chief;
  ParameterServerStrategy::Options options;
  options.mode = mode;
  cluster.run(
      options, [&](ParameterServerStrategy& s) { chief = fit_with(s, optimizer, quiet(3)); },
      [&](ParameterServerStrategy& s) {
        Outcome worker = fit_with(s, optimizer, quiet(3));
        EXPECT_TRUE(worker.history.epochs.empty()) << "a worker's fit returns no history";
      });
  EXPECT_TRUE(cluster.worker_errors.empty()) << cluster.worker_errors.front();
  auto expected = reference.history.get("loss"), got = chief.history.get("loss");
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << "epoch " << i;
  EXPECT_TRUE(torch::allclose(chief.params, reference.params, 1e-5, 1e-6))
      << (chief.params - reference.params).abs().max().item<double>();
}

TEST(ParameterServerStrategyTest, OneAsyncWorkerFollowsDefaultStrategyWithSgdMomentum) {
  expect_follows_default_strategy(sgd(0.5, 0.9), /*num_ps=*/2);
}

TEST(ParameterServerStrategyTest, OneAsyncWorkerFollowsDefaultStrategyWithAdam) {
  expect_follows_default_strategy(adam(0.01), /*num_ps=*/1);
}

TEST(ParameterServerStrategyTest, OneSyncWorkerFollowsDefaultStrategy) {
  expect_follows_default_strategy(sgd(0.5, 0.9), /*num_ps=*/2, ps::UpdateMode::kSync);
}

// Several workers: the small MLP problem barely learns (the Fashion-MNIST process tests
// check convergence); here the loss must stay close to the single-replica run's and each
// ps must have applied one update per round (kSync) or one per push (otherwise).
void expect_near_reference(ParameterServerStrategy::Options options, int workers, int num_ps,
                           double tol) {
  const int epochs = 2;
  DefaultStrategy one;
  Outcome reference = fit_with(one, sgd(0.5, 0.0), quiet(epochs));
  LocalCluster cluster(workers, num_ps);
  Outcome chief;
  std::vector<ps::PsStats> stats;
  cluster.run(
      options,
      [&](ParameterServerStrategy& s) {
        chief = fit_with(s, sgd(0.5, 0.0), quiet(epochs));
        ps::PsClient probe(cluster.spec.ps, cluster.secret);
        for (int i = 0; i < num_ps; ++i) stats.push_back(probe.stats(i));
      },
      [&](ParameterServerStrategy& s) { fit_with(s, sgd(0.5, 0.0), quiet(epochs)); });
  EXPECT_TRUE(cluster.worker_errors.empty()) << cluster.worker_errors.front();
  const auto loss = chief.history.get("loss"), expected = reference.history.get("loss");
  ASSERT_EQ(loss.size(), expected.size());
  for (size_t e = 0; e < loss.size(); ++e) EXPECT_NEAR(loss[e], expected[e], tol) << "epoch " << e;
  const int64_t rounds = epochs * kRows / kGlobalBatch;
  const int64_t updates = options.mode == ps::UpdateMode::kSync ? rounds : rounds * workers;
  ASSERT_EQ(stats.size(), static_cast<size_t>(num_ps));
  for (const auto& st : stats) {
    EXPECT_EQ(st.version, updates);
    EXPECT_EQ(st.pushes_dropped, 0);
  }
}

TEST(ParameterServerStrategyTest, SyncTwoWorkersTwoPsApplyOneMeanUpdatePerRound) {
  ParameterServerStrategy::Options o;
  o.mode = ps::UpdateMode::kSync;
  expect_near_reference(o, 2, 2, 0.01);
}

TEST(ParameterServerStrategyTest, AsyncAndBoundedStalenessApplyEveryPush) {
  ParameterServerStrategy::Options o;
  expect_near_reference(o, 2, 1, 0.05);
  o.mode = ps::UpdateMode::kBoundedStaleness;
  o.max_staleness = 1;
  expect_near_reference(o, 4, 2, 0.05);
}

// A worker that starts only after the others ran every step still ends cleanly: the chief
// waits for it to connect before it stops the cluster (it used to find the ps gone).
TEST(ParameterServerStrategyTest, WorkerStartingAfterTheTrainingEndsCleanly) {
  LocalCluster cluster(2, 1);
  std::atomic<bool> trained{false};
  cluster.run(
      ParameterServerStrategy::Options{},
      [&](ParameterServerStrategy& s) {
        fit_with(s, sgd(0.5, 0.0), quiet(1));
        trained = true;
      },
      [&](ParameterServerStrategy& s) {
        while (s.worker_index() == 1 && !trained) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        fit_with(s, sgd(0.5, 0.0), quiet(1));
      });
  EXPECT_TRUE(cluster.worker_errors.empty()) << cluster.worker_errors.front();
}

TEST(ParameterServerStrategyTest, SavedVariablesComeBackOnRestore) {
  LocalCluster cluster(1, 2);
  cluster.run(
      ParameterServerStrategy::Options{},
      [&](ParameterServerStrategy& s) {
        ReplicatedModel model = s.make_model(mlp_factory());
        torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
        Trainer trainer(s, model, opt, losses::sparse_categorical_crossentropy());
        trainer.fit(training_data(), quiet(1));
        std::map<std::string, std::string> files;
        s.save_variables(model, files);
        EXPECT_EQ(files.count("ps-0") + files.count("ps-1"), 2u);
        const at::Tensor saved = torch_testing::flat_params(model.module()).clone();
        trainer.fit(training_data(), quiet(1));
        s.refresh_model(model);
        EXPECT_FALSE(torch::equal(saved, torch_testing::flat_params(model.module())));
        s.restore_variables(model, files);
        s.refresh_model(model);
        EXPECT_TRUE(torch::equal(saved, torch_testing::flat_params(model.module())));
      },
      [&](ParameterServerStrategy& s) {
        ReplicatedModel model = s.make_model(mlp_factory());
        torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
        Trainer trainer(s, model, opt, losses::sparse_categorical_crossentropy());
        trainer.fit(training_data(), quiet(1));
      });
}

TEST(ParameterServerStrategyTest, ClearErrorsForBadConfigurationsAndOptimizers) {
  ::setenv("TF_CONFIG", R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
                            "task": {"type": "chief", "index": 0}})",
           1);
  try {
    ParameterServerStrategy s;
    ADD_FAILURE() << "a cluster without ps tasks was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ps"), std::string::npos) << e.what();
  }
  ::setenv("TF_CONFIG", R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"],
                            "ps": ["127.0.0.1:3"]}, "task": {"type": "worker", "index": 1}})",
           1);
  try {
    ParameterServerStrategy s;
    ADD_FAILURE() << "worker index 1 of 1 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("index 1"), std::string::npos) << e.what();
  }
  ::unsetenv("TF_CONFIG");

  LocalCluster cluster(1, 1);
  cluster.run(
      ParameterServerStrategy::Options{},
      [&](ParameterServerStrategy& s) {
        ReplicatedModel model = s.make_model(mlp_factory());
        torch::optim::Adagrad adagrad(model.parameters(), torch::optim::AdagradOptions(0.1));
        try {
          s.make_updater(model, adagrad);
          ADD_FAILURE() << "Adagrad was accepted";
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("SGD and Adam"), std::string::npos) << e.what();
        }
        torch::optim::SGD plain(model.parameters(), 0.1);
        Trainer trainer(s, model, plain, losses::sparse_categorical_crossentropy());
        FitOptions unknown_length = quiet(1);
        try {
          trainer.fit(classification_data(kRows).repeat().batch(kGlobalBatch), unknown_length);
          ADD_FAILURE() << "an endless dataset without steps_per_epoch was accepted";
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("steps_per_epoch"), std::string::npos) << e.what();
        }
      },
      [&](ParameterServerStrategy& s) {  // may see the cluster end before it starts serving
        ReplicatedModel model = s.make_model(mlp_factory());
        torch::optim::SGD plain(model.parameters(), 0.1);
        GradientUpdater updater = s.make_updater(model, plain);
        s.serve();
      });
}

}  // namespace
}  // namespace chorus
