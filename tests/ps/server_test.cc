// Servers on loopback in this process: create / wait_for_variables / pull / async push,
// shutdown, stop, and the unavailable and timeout paths.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "../common/free_port.h"
#include "ps_test_util.h"
#include "util/net.h"

namespace chorus::ps::testing {
namespace {

using ::testing::HasSubstr;

TEST(PsServer, CreateThenPullFromAnotherClient) {
  LocalCluster cluster(3);
  ModelLayout layout = test_layout(3);
  Arrays initial(layout.variables, 1.0f);
  auto chief = make_client(cluster);
  chief->create(layout, initial.in(), sgd(0.1));

  auto worker = make_client(cluster);
  const ModelLayout& seen = worker->wait_for_variables(test_variables());
  ASSERT_EQ(seen.shards.size(), layout.shards.size());
  for (size_t i = 0; i < seen.shards.size(); ++i) {
    EXPECT_EQ(seen.shards[i].ps, layout.shards[i].ps);
    EXPECT_EQ(seen.shards[i].offset, layout.shards[i].offset);
  }
  Arrays got = Arrays::filled(layout.variables, -1.0f);
  EXPECT_EQ(worker->pull(got.out()), 0);
  EXPECT_EQ(got.data, initial.data);
  int64_t total = 0;
  for (int p = 0; p < 3; ++p) total += worker->stats(p).elements;
  EXPECT_EQ(total, 1000 + 333 + 7 + 50);
}

TEST(PsServer, WaitForVariablesWaitsForTheChief) {
  LocalCluster cluster(2);
  ModelLayout layout = test_layout(2);
  auto worker = make_client(cluster);
  auto waiting = std::async(std::launch::async,
                            [&] { return worker->wait_for_variables({}).variables.size(); });
  std::this_thread::sleep_for(milliseconds(200));
  Arrays initial(layout.variables, 0.0f);
  make_client(cluster)->create(layout, initial.in(), sgd(0.1));
  EXPECT_EQ(waiting.get(), layout.variables.size());
}

TEST(PsServer, WaitForVariablesChecksTheProgramsVariables) {
  LocalCluster cluster(2);
  ModelLayout layout = test_layout(2);
  Arrays initial(layout.variables, 0.0f);
  make_client(cluster)->create(layout, initial.in(), sgd(0.1));
  auto vars = test_variables();
  vars[1].numel += 1;
  try {
    make_client(cluster)->wait_for_variables(vars);
    ADD_FAILURE() << "no InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(
        e.what(),
        HasSubstr("variable 1 is 'dense/kernel' with 333 elements on the parameter servers"));
  }
}

TEST(PsServer, WaitForVariablesTimesOut) {
  LocalCluster cluster(2);
  auto worker = make_client(cluster, milliseconds(300));
  auto start = Clock::now();
  try {
    worker->wait_for_variables(test_variables());
    ADD_FAILURE() << "no TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter servers 0 1 have no variables"));
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
}

TEST(PsServer, AsyncPushesFromManyThreadsAllApply) {
  LocalCluster cluster(2);
  ModelLayout layout = test_layout(2);
  Arrays initial = Arrays::filled(layout.variables, 1000.0f);
  make_client(cluster)->create(layout, initial.in(), sgd(0.5));
  constexpr int kThreads = 4, kPushes = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto worker = make_client(cluster);
      worker->wait_for_variables(test_variables());
      Arrays grads = Arrays::filled(layout.variables, static_cast<float>(t + 1));
      for (int k = 0; k < kPushes; ++k) worker->push(grads.in(), 0);
    });
  }
  for (auto& t : threads) t.join();
  // Plain SGD sums the updates; every partial sum is an exact float, so order is irrelevant.
  float expected = 1000.0f - 0.5f * kPushes * (1 + 2 + 3 + 4);
  auto reader = make_client(cluster);
  reader->wait_for_variables({});
  Arrays got = Arrays::filled(layout.variables, 0.0f);
  EXPECT_EQ(reader->pull(got.out()), kThreads * kPushes);
  for (const auto& v : got.data) {
    for (float x : v) ASSERT_EQ(x, expected);
  }
  EXPECT_EQ(reader->stats(0).pushes_applied, kThreads * kPushes);
}

TEST(PsServer, PushedLearningRateSticks) {
  LocalCluster cluster(1);
  std::vector<VariableSpec> vars = {{"w", 4}};
  ModelLayout layout{vars, round_robin(vars, 1)};
  Arrays initial = Arrays::filled(vars, 10.0f);
  auto client = make_client(cluster);
  client->create(layout, initial.in(), sgd(1.0));
  Arrays ones = Arrays::filled(vars, 1.0f);
  client->push(ones.in(), 0, 0.25);  // 10 - 0.25
  client->push(ones.in(), 0);        // keeps 0.25: 9.5
  Arrays got = Arrays::filled(vars, 0.0f);
  client->pull(got.out());
  EXPECT_EQ(got.data[0][0], 9.5f);
  EXPECT_THROW(client->push(ones.in(), 0, NAN), InvalidArgument);
}

TEST(PsServer, RecreateReplacesTheState) {
  LocalCluster cluster(2);
  ModelLayout layout = test_layout(2);
  auto chief = make_client(cluster);
  Arrays first(layout.variables, 1.0f), second(layout.variables, 7.0f);
  chief->create(layout, first.in(), sgd(0.1));
  chief->push(Arrays::filled(layout.variables, 1.0f).in(), 0);
  chief->create(layout, second.in(), sgd(0.1));
  Arrays got = Arrays::filled(layout.variables, 0.0f);
  EXPECT_EQ(chief->pull(got.out()), 0);
  EXPECT_EQ(got.data, second.data);
  EXPECT_EQ(chief->stats(1).pushes_applied, 0);
}

TEST(PsServer, CallerMistakesAreInvalidArgument) {
  LocalCluster cluster(1);
  auto client = make_client(cluster);
  Arrays a = Arrays::filled(test_variables(), 0.0f);
  EXPECT_THROW(client->pull(a.out()), InvalidArgument);  // no layout yet
  ModelLayout layout = test_layout(1);
  EXPECT_THROW(client->create(layout, {}, sgd(0.1)), InvalidArgument);
  ModelLayout gap = layout;
  gap.shards.pop_back();
  EXPECT_THROW(client->create(gap, a.in(), sgd(0.1)), InvalidArgument);
  ModelLayout wrong_ps = layout;
  wrong_ps.shards[0].ps = 1;
  EXPECT_THROW(client->create(wrong_ps, a.in(), sgd(0.1)), InvalidArgument);
  client->create(layout, a.in(), sgd(0.1));
  std::vector<float*> too_few = a.out();
  too_few.pop_back();
  EXPECT_THROW(client->pull(too_few), InvalidArgument);
  EXPECT_THROW(client->stats(1), InvalidArgument);
  EXPECT_EQ(client->pull(a.out()), 0);  // still usable
}

TEST(PsServer, ShutdownServersEndsRunParameterServer) {
  uint16_t port = test::free_port();
  ClusterSpec spec;
  spec.chief = "127.0.0.1:1";
  spec.workers = {"127.0.0.1:2"};
  spec.ps = {"127.0.0.1:" + std::to_string(port)};
  spec.role = Role::kPs;
  auto ps = std::async(std::launch::async, [&] { run_parameter_server(spec, test_secret()); });
  PsClient client(spec.ps, test_secret(), milliseconds(20000));
  std::vector<VariableSpec> vars = {{"w", 3}};
  client.create({vars, round_robin(vars, 1)}, Arrays(vars, 0).in(), sgd(0.1));  // ps is up
  client.shutdown_servers();
  EXPECT_EQ(ps.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  ps.get();
  ClusterSpec worker = spec;
  worker.role = Role::kWorker;
  EXPECT_THROW(run_parameter_server(worker, test_secret()), InvalidArgument);
}

TEST(PsServer, StopWakesAWaitingPull) {
  LocalCluster cluster(1);
  ModelLayout layout = test_layout(1);
  auto client = make_client(cluster);
  client->create(layout, Arrays(layout.variables, 0).in(), sgd(0.1, UpdateMode::kSync, 2));
  auto pulling = std::async(std::launch::async, [&] {
    Arrays got = Arrays::filled(layout.variables, 0.0f);
    client->pull(got.out(), 5);
  });
  std::this_thread::sleep_for(milliseconds(100));
  cluster.servers[0]->stop();
  ASSERT_EQ(pulling.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  try {
    pulling.get();
    ADD_FAILURE() << "no UnavailableError";
  } catch (const UnavailableError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("parameter server 0 (" + cluster.addresses[0] + ") is unavailable"));
  }
  cluster.servers[0]->wait();  // returns after stop()
}

TEST(PsServer, UnreachablePsIsUnavailable) {
  uint16_t port = test::free_port();
  std::string address = "127.0.0.1:" + std::to_string(port);
  PsClient client({address}, test_secret(), milliseconds(300));
  std::vector<VariableSpec> vars = {{"w", 3}};
  try {
    client.create({vars, round_robin(vars, 1)}, Arrays(vars, 0).in(), sgd(0.1));
    ADD_FAILURE() << "no UnavailableError";
  } catch (const UnavailableError& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter server 0 (" + address + ") is unavailable"));
  }
  EXPECT_THROW(client.stats(0), UnavailableError);  // the client is unusable now
}

}  // namespace
}  // namespace chorus::ps::testing
