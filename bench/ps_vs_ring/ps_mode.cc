// ps-server / ps-worker: synchronous parameter-server steps (UpdateMode::kSync). A step on
// worker i: push the whole gradient (its shards go to their ps), then pull every variable
// with min_version = the next version, which the ps reach only once all num_workers pushes
// of the round are in. Worker 0 (the chief) creates the variables and, once every worker
// has left a file in --done-dir, shuts the servers down.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "chorus/ps/client.h"
#include "chorus/ps/cluster.h"
#include "chorus/ps/server.h"
#include "modes.h"

namespace chorus::bench {
namespace {

constexpr float kGradient = 1e-3f, kInitial = 1.0f;
constexpr double kLearningRate = 0.5;

// Layers of a dense model of the given size (float32): shares like an embedding, two
// convolutions, two dense layers with biases. Sums to exactly model_bytes / 4 elements.
std::vector<ps::VariableSpec> model_variables(int64_t model_bytes) {
  const int64_t total = model_bytes / 4;
  std::vector<ps::VariableSpec> v = {{"embedding/weights", total * 3 / 8},
                                     {"conv1/kernel", total / 64},
                                     {"conv2/kernel", total * 3 / 64},
                                     {"dense1/kernel", total * 5 / 16},
                                     {"dense1/bias", 4096},
                                     {"dense2/kernel", 0},
                                     {"dense2/bias", 1000}};
  int64_t used = 0;
  for (const auto& s : v) used += s.numel;
  v[5].numel = total - used;
  CHORUS_CHECK_ARG(v[5].numel > 0, "ps: --model-mb too small for the layout");
  return v;
}

Secret secret_from_env() {
  auto s = Secret::from_env();
  CHORUS_CHECK_ARG(s && !s->empty(), "ps modes need CHORUS_SECRET or CHORUS_SECRET_FILE");
  return *s;
}

template <typename T>
std::vector<T*> pointers(std::vector<std::vector<float>>& buffers) {
  std::vector<T*> out;
  for (auto& b : buffers) out.push_back(b.data());
  return out;
}

// After `rounds` updates of the mean gradient kGradient: p = kInitial - rounds * lr * g.
void check_parameters(const std::vector<std::vector<float>>& params, int64_t rounds) {
  double want = kInitial - static_cast<double>(rounds) * kLearningRate * kGradient;
  for (const auto& p : params) {
    if (std::abs(p.front() - want) > 1e-4 || std::abs(p.back() - want) > 1e-4) {
      CHORUS_THROW(Error, "ps: parameter ", p.front(), " after ", rounds, " rounds, want ", want);
    }
  }
}

// Every worker leaves done.<i> in `dir`; the chief waits for all of them (shared file system:
// the namespaces separate networks only).
void announce_done(const std::string& dir, int worker) {
  std::ofstream(dir + "/done." + std::to_string(worker)) << "done\n";
}

void wait_all_done(const std::string& dir, int num_workers) {
  for (int i = 0; i < num_workers; ++i) {
    std::string path = dir + "/done." + std::to_string(i);
    for (int tries = 0; ::access(path.c_str(), F_OK) != 0; ++tries) {
      CHORUS_CHECK_ARG(tries < 6000, "ps: worker ", i, " never finished (", path, ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

void create_or_wait(ps::PsClient& client, const BenchArgs& args,
                    const std::vector<ps::VariableSpec>& specs,
                    std::vector<std::vector<float>>& params) {
  if (args.worker != 0) {
    client.wait_for_variables(specs);
    return;
  }
  ps::ModelLayout layout;
  layout.variables = specs;
  layout.shards = ps::size_balanced(specs, client.num_ps());
  ps::CreateOptions options;
  options.optimizer.learning_rate = kLearningRate;
  options.mode = ps::UpdateMode::kSync;
  options.num_workers = args.num_workers;
  client.create(layout, pointers<const float>(params), options);
}

}  // namespace

int run_ps_server(const BenchArgs& args) {
  double wall_start = wall_seconds();
  CHORUS_CHECK_ARG(!args.listen.empty(), "ps-server needs --listen HOST:PORT");
  auto [host, port] = ps::split_address(args.listen, "--listen");
  ps::ParameterServer server(host, port, secret_from_env());
  server.wait();
  print_result("mode=ps-server role=server index=" + args.listen, StepTimes{}, wall_start);
  return 0;
}

int run_ps_worker(const BenchArgs& args) {
  double wall_start = wall_seconds();
  CHORUS_CHECK_ARG(!args.ps.empty() && !args.done_dir.empty() && args.num_workers >= 1,
                   "ps-worker needs --ps, --num-workers and --done-dir");
  auto specs = model_variables(args.model_bytes);
  std::vector<std::vector<float>> params, grads;
  for (const auto& s : specs) {
    params.emplace_back(static_cast<size_t>(s.numel), kInitial);
    grads.emplace_back(static_cast<size_t>(s.numel), kGradient);
  }
  ps::PsClient client(args.ps, secret_from_env());
  create_or_wait(client, args, specs, params);
  int64_t version = client.pull(pointers<float>(params), 0);
  const int64_t first_version = version;
  std::vector<double> times;
  for (int step = 0; step < args.warmup + args.steps; ++step) {
    double t0 = wall_seconds();
    client.push(pointers<const float>(grads), version);
    version = client.pull(pointers<float>(params), version + 1);
    if (step >= args.warmup) times.push_back(wall_seconds() - t0);
  }
  check_parameters(params, version);
  CHORUS_CHECK_ARG(version - first_version >= args.warmup + args.steps, "ps: only ",
                   version - first_version, " rounds");
  announce_done(args.done_dir, args.worker);
  int64_t dropped = 0;
  if (args.worker == 0) {
    wait_all_done(args.done_dir, args.num_workers);
    for (int i = 0; i < client.num_ps(); ++i) dropped += client.stats(i).pushes_dropped;
    client.shutdown_servers();
  }
  std::string fields =
      "mode=ps n=" + std::to_string(args.num_workers) + " k=" + std::to_string(client.num_ps()) +
      " role=worker index=" + std::to_string(args.worker) +
      " bytes=" + std::to_string(args.model_bytes) + " steps=" + std::to_string(args.steps) +
      " warmup=" + std::to_string(args.warmup) + " dropped=" + std::to_string(dropped);
  print_result(fields, summarize(times), wall_start);
  return 0;
}

}  // namespace chorus::bench
