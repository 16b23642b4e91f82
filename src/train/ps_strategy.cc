// ParameterServerStrategy: the torch side of src/ps. Parameters travel as float32 arrays
// between the model's tensors and the ps tasks; the optimizer's hyperparameters are read
// from the torch optimizer once, on the chief, and applied on the ps tasks.
#include "chorus/train/ps_strategy.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "chorus/error.h"
#include "chorus/ps/client.h"
#include "chorus/ps/partitioner.h"
#include "chorus/ps/server.h"
#include "train/gradient_sync.h"
#include "util/byte_order.h"
#include "util/env.h"
#include "util/log.h"

namespace chorus {

namespace {

// How long finish() waits for workers that never connected (see there).
constexpr std::chrono::seconds kLateWorkerGrace{5};

// A scheduled step's argument: the fields below (little-endian), then the user's bytes.
struct StepHeader {
  int64_t step = 0;
  int64_t min_version = 0;  // the ps version to pull (kSync); 0 otherwise
  double learning_rate = -1;
};
constexpr size_t kHeaderBytes = sizeof(int64_t) * 2 + sizeof(double);

std::string encode_task(const StepHeader& h, const std::string& user) {
  std::string out;
  out.reserve(kHeaderBytes + user.size());
  byte_order::put_i64(out, h.step);
  byte_order::put_i64(out, h.min_version);
  byte_order::put_f64(out, h.learning_rate);
  return out + user;
}

StepHeader decode_task(const std::string& bytes, std::string& user) {
  CHORUS_CHECK_ARG(bytes.size() >= kHeaderBytes, "ParameterServerStrategy: a step argument of ",
                   bytes.size(), " bytes is shorter than its header");
  StepHeader h;
  byte_order::ByteReader in(bytes, "ParameterServerStrategy: step argument");
  h.step = in.i64();
  h.min_version = in.i64();
  h.learning_rate = in.f64();
  user = bytes.substr(kHeaderBytes);
  return h;
}

std::vector<at::Tensor> checked_parameters(ReplicatedModel& model) {
  auto params = model.parameters();
  for (const auto& p : params) {
    CHORUS_CHECK_ARG(p.scalar_type() == at::kFloat && p.is_contiguous() && p.device().is_cpu(),
                     "ParameterServerStrategy: parameters must be contiguous float32 CPU tensors");
  }
  return params;
}

std::vector<ps::VariableSpec> variable_specs(ReplicatedModel& model) {
  std::vector<ps::VariableSpec> specs;
  for (const auto& item : model.module().named_parameters()) {
    specs.push_back({item.key(), item.value().numel()});
  }
  return specs;
}

ps::OptimizerConfig optimizer_config(::torch::optim::Optimizer& optimizer) {
  CHORUS_CHECK_ARG(optimizer.param_groups().size() == 1,
                   "ParameterServerStrategy: one parameter group is supported, got ",
                   optimizer.param_groups().size());
  ps::OptimizerConfig c;
  auto& options = optimizer.param_groups()[0].options();
  if (auto* sgd = dynamic_cast<::torch::optim::SGDOptions*>(&options)) {
    CHORUS_CHECK_ARG(sgd->dampening() == 0, "ParameterServerStrategy: SGD dampening must be 0");
    c.kind = ps::OptimizerConfig::Kind::kSgd;
    c.learning_rate = sgd->lr();
    c.momentum = sgd->momentum();
    c.nesterov = sgd->nesterov();
    c.weight_decay = sgd->weight_decay();
  } else if (auto* adam = dynamic_cast<::torch::optim::AdamOptions*>(&options)) {
    CHORUS_CHECK_ARG(!adam->amsgrad(),
                     "ParameterServerStrategy: Adam with amsgrad is not supported");
    c.kind = ps::OptimizerConfig::Kind::kAdam;
    c.learning_rate = adam->lr();
    c.beta1 = std::get<0>(adam->betas());
    c.beta2 = std::get<1>(adam->betas());
    c.eps = adam->eps();
    c.weight_decay = adam->weight_decay();
  } else {
    CHORUS_THROW(InvalidArgument,
                 "ParameterServerStrategy: the parameter servers run SGD and Adam; "
                 "build the optimizer as torch::optim::SGD or torch::optim::Adam");
  }
  return c;
}

std::chrono::milliseconds resolve(std::chrono::milliseconds t) {
  return t.count() > 0 ? t
                       : std::chrono::duration_cast<std::chrono::milliseconds>(default_timeout());
}

}  // namespace

struct ParameterServerStrategy::Impl {
  ps::ClusterSpec cluster;
  Secret secret;
  Options options;
  std::unique_ptr<ps::PsClient> client;          // chief and workers
  std::unique_ptr<ps::Coordinator> coordinator;  // chief
  std::map<std::string, PsStepFn> steps;
  ReplicatedModel* model = nullptr;  // the one make_updater saw
  ::torch::optim::Optimizer* optimizer = nullptr;
  ps::ModelLayout layout;
  // Chief: steps scheduled so far; kSync rounds count from `round_origin` at `round_base`.
  int64_t scheduled = 0, round_origin = 0, round_base = 0;
  // Worker: the version the current step's parameters came from (its push's tag).
  int64_t pulled_version = 0;
  bool finished = false;

  ps::PsClient& ps_client() {
    if (!client)
      client = std::make_unique<ps::PsClient>(cluster.ps, secret, resolve(options.timeout));
    return *client;
  }
  void pull_into(ReplicatedModel& m, int64_t min_version);
  void push_from(ReplicatedModel& m);
  std::string run_step(const std::string& name, const std::string& argument);
  void create_variables();
};

void ParameterServerStrategy::Impl::pull_into(ReplicatedModel& m, int64_t min_version) {
  at::NoGradGuard no_grad;
  auto params = checked_parameters(m);
  std::vector<float*> dst;
  for (auto& p : params) dst.push_back(p.data_ptr<float>());
  pulled_version = ps_client().pull(dst, min_version);
  m.sync_replicas();
}

void ParameterServerStrategy::Impl::push_from(ReplicatedModel& m) {
  auto params = checked_parameters(m);
  std::vector<at::Tensor> grads;  // keeps zero tensors for parameters without a gradient alive
  std::vector<const float*> src;
  for (auto& p : params) {
    at::Tensor g = p.grad().defined() ? p.grad().contiguous() : at::zeros_like(p);
    grads.push_back(g);
    src.push_back(g.data_ptr<float>());
  }
  const double lr = optimizer ? optimizer->param_groups()[0].options().get_lr() : -1;
  ps_client().push(src, pulled_version, lr);
}

void ParameterServerStrategy::Impl::create_variables() {
  at::NoGradGuard no_grad;
  auto params = checked_parameters(*model);
  std::vector<const float*> initial;
  for (auto& p : params) initial.push_back(p.data_ptr<float>());
  ps::CreateOptions o;
  o.optimizer = optimizer_config(*optimizer);
  o.mode = options.mode;
  o.num_workers = cluster.num_workers();
  ps_client().create(layout, initial, o);
  round_origin = scheduled;
  round_base = 0;
}

std::string ParameterServerStrategy::Impl::run_step(const std::string& name,
                                                    const std::string& argument) {
  auto it = steps.find(name);
  CHORUS_CHECK_ARG(it != steps.end(), "ParameterServerStrategy: worker ", cluster.task_index,
                   " has no step named '", name, "' (define_step it on every task)");
  CHORUS_CHECK_ARG(model != nullptr, "ParameterServerStrategy: make_updater() before serve()");
  std::string user;
  const StepHeader h = decode_task(argument, user);
  if (h.learning_rate >= 0 && optimizer) {
    for (auto& group : optimizer->param_groups()) group.options().set_lr(h.learning_rate);
  }
  pull_into(*model, h.min_version);
  if (options.mode == ps::UpdateMode::kSync) pulled_version = h.min_version;
  PsStepContext ctx{cluster.task_index, h.step, user, *model};
  std::vector<double> values = it->second(ctx);
  std::string out(values.size() * sizeof(double), '\0');
  if (!values.empty()) std::memcpy(&out[0], values.data(), out.size());
  return out;
}

// ---- the gradient path: push instead of an optimizer step ----------------------------

namespace {

class PsSync : public GradientSync {
 public:
  PsSync(ParameterServerStrategy::Impl& impl, ReplicatedModel& model,
         ::torch::optim::Optimizer& optimizer)
      : impl_(impl), model_(model), optimizer_(optimizer) {}
  void apply() override;
  void zero_grad() override { optimizer_.zero_grad(); }
  ::torch::optim::Optimizer& optimizer() override { return optimizer_; }

 private:
  ParameterServerStrategy::Impl& impl_;
  ReplicatedModel& model_;
  ::torch::optim::Optimizer& optimizer_;
};

}  // namespace

void PsSync::apply() {
  CHORUS_CHECK_ARG(
      impl_.cluster.role == ps::Role::kWorker,
      "ParameterServerStrategy: gradients are applied by workers inside scheduled steps");
  impl_.push_from(model_);
  zero_grad();
}

// ---- ParameterServerStrategy ----------------------------------------------------------

ParameterServerStrategy::ParameterServerStrategy() : ParameterServerStrategy(Options{}) {}

ParameterServerStrategy::ParameterServerStrategy(Options options)
    : ParameterServerStrategy(ps::ClusterSpec::from_env(), Secret{}, options) {}

ParameterServerStrategy::ParameterServerStrategy(ps::ClusterSpec cluster, Secret secret,
                                                 Options options)
    : Strategy(cluster.num_workers(), cluster.role == ps::Role::kWorker ? cluster.task_index : 0, 1,
               nullptr),
      impl_(std::make_unique<Impl>()) {
  cluster.validate();
  CHORUS_CHECK_ARG(options.max_staleness >= 0,
                   "ParameterServerStrategy: max_staleness must be >= 0, got ",
                   options.max_staleness);
  CHORUS_CHECK_ARG(options.rounds_in_flight >= 1,
                   "ParameterServerStrategy: rounds_in_flight must be >= 1, got ",
                   options.rounds_in_flight);
  impl_->secret = secret.empty() ? ps::cluster_secret(cluster) : std::move(secret);
  impl_->cluster = std::move(cluster);
  impl_->options = options;
  const ps::ClusterSpec& c = impl_->cluster;
  if (c.role == ps::Role::kPs) {
    ps::run_parameter_server(c, impl_->secret);
    if (options.exit_after_serving) {
      std::fflush(nullptr);
      std::exit(0);
    }
  } else if (c.role == ps::Role::kChief) {
    auto [host, port] = ps::split_address(c.chief, "the chief's address");
    ps::CoordinatorOptions o;
    if (options.mode == ps::UpdateMode::kBoundedStaleness) o.max_staleness = options.max_staleness;
    o.no_worker_timeout = resolve(options.timeout);
    impl_->coordinator = std::make_unique<ps::Coordinator>(host, port, impl_->secret, o);
  }
}

ParameterServerStrategy::~ParameterServerStrategy() {
  try {
    finish();
  } catch (const std::exception& e) {
    CHORUS_LOG(kWarning, "ps") << "shutting the cluster down: " << e.what();
  }
}

bool ParameterServerStrategy::is_chief() const { return impl_->cluster.role == ps::Role::kChief; }
ps::Role ParameterServerStrategy::role() const { return impl_->cluster.role; }
const ps::ClusterSpec& ParameterServerStrategy::cluster() const { return impl_->cluster; }
const ParameterServerStrategy::Options& ParameterServerStrategy::options() const {
  return impl_->options;
}

ReplicatedModel ParameterServerStrategy::make_model(const ModelFactory& factory) {
  CHORUS_CHECK_ARG(role() != ps::Role::kPs, "ParameterServerStrategy: a ps task builds no model");
  return ReplicatedModel({factory()}, /*shared_variables=*/false);
}

GradientUpdater ParameterServerStrategy::make_updater(ReplicatedModel& model,
                                                      ::torch::optim::Optimizer& optimizer) {
  CHORUS_CHECK_ARG(role() != ps::Role::kPs, "ParameterServerStrategy: a ps task has no optimizer");
  Impl& impl = *impl_;
  impl.model = &model;
  impl.optimizer = &optimizer;
  const auto specs = variable_specs(model);
  CHORUS_CHECK_ARG(!specs.empty(), "ParameterServerStrategy: the model has no parameters");
  if (is_chief()) {
    impl.layout = {
        specs, ps::size_balanced(specs, impl.cluster.num_ps(), impl.options.max_shard_elements)};
    impl.create_variables();
  } else {
    optimizer_config(optimizer);  // the same check as on the chief, before any step
    impl.layout = impl.ps_client().wait_for_variables(specs);
  }
  return GradientUpdater(std::make_unique<PsSync>(impl, model, optimizer));
}

Dataset ParameterServerStrategy::distribute_dataset(const Dataset& global,
                                                    AutoShardPolicy policy) const {
  if (is_chief() || num_workers() == 1) return global;
  return global.distribute(num_workers(), worker_index(), policy);
}

void ParameterServerStrategy::define_step(const std::string& name, PsStepFn fn) {
  CHORUS_CHECK_ARG(!name.empty() && fn, "define_step: a name and a function are required");
  impl_->steps[name] = std::move(fn);
}

ps::RemoteValue ParameterServerStrategy::schedule(const std::string& name,
                                                  const std::string& argument) {
  Impl& impl = *impl_;
  CHORUS_CHECK_ARG(is_chief(), "ParameterServerStrategy::schedule runs on the chief");
  CHORUS_CHECK_ARG(!impl.finished, "ParameterServerStrategy::schedule after finish()");
  StepHeader h;
  h.step = impl.scheduled++;
  if (impl.options.mode == ps::UpdateMode::kSync) {
    h.min_version = impl.round_base + (h.step - impl.round_origin) / num_workers();
  }
  if (impl.optimizer) h.learning_rate = impl.optimizer->param_groups()[0].options().get_lr();
  return impl.coordinator->schedule(name, encode_task(h, argument));
}

void ParameterServerStrategy::join() {
  CHORUS_CHECK_ARG(is_chief(), "ParameterServerStrategy::join runs on the chief");
  impl_->coordinator->join();
}

std::vector<double> ParameterServerStrategy::values(const ps::RemoteValue& value) {
  const std::string& bytes = value.get();
  CHORUS_CHECK_ARG(bytes.size() % sizeof(double) == 0, "ParameterServerStrategy: a step result of ",
                   bytes.size(), " bytes is not a list of doubles");
  std::vector<double> out(bytes.size() / sizeof(double));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

void ParameterServerStrategy::serve() {
  if (role() != ps::Role::kWorker) return;
  Impl& impl = *impl_;
  ps::serve_coordinator(
      impl.cluster.chief, impl.cluster.task_index, impl.secret,
      [&impl](const std::string& name, const std::string& argument) {
        return impl.run_step(name, argument);
      },
      resolve(impl.options.timeout));
}

void ParameterServerStrategy::finish() {
  Impl& impl = *impl_;
  if (!is_chief() || impl.finished) return;
  impl.finished = true;
  // A worker still starting up (its steps went to the others) would find the ps gone and
  // fail: after a training, give every worker a moment to connect and be told to stop.
  if (impl.scheduled > 0 &&
      !impl.coordinator->wait_for_workers_seen(num_workers(), kLateWorkerGrace)) {
    CHORUS_LOG(kWarning, "ps") << "shutting down with "
                               << num_workers() - impl.coordinator->num_workers_seen()
                               << " worker(s) that never connected";
  }
  impl.coordinator->shutdown_workers();
  impl.ps_client().shutdown_servers();
}

void ParameterServerStrategy::refresh_model(ReplicatedModel& model) {
  if (is_chief() && !impl_->finished) impl_->pull_into(model, 0);
}

void ParameterServerStrategy::save_variables(ReplicatedModel& model,
                                             std::map<std::string, std::string>& files) {
  if (!is_chief()) return;
  refresh_model(model);
  for (auto& [name, bytes] : impl_->ps_client().save_state()) files[name] = std::move(bytes);
}

void ParameterServerStrategy::restore_variables(ReplicatedModel& model,
                                                const std::map<std::string, std::string>& files) {
  Impl& impl = *impl_;
  if (!is_chief() || impl.model == nullptr) return;
  CHORUS_CHECK_ARG(&model == impl.model,
                   "ParameterServerStrategy: restore into the model given to make_updater");
  if (files.count("ps-0") == 0) {
    // A checkpoint of another strategy: its model becomes the variables, slots start fresh.
    impl.create_variables();
    return;
  }
  std::map<std::string, std::string> ps_files;
  for (const auto& [name, bytes] : files) {
    if (name.rfind("ps-", 0) == 0) ps_files[name] = bytes;
  }
  impl.ps_client().restore_state(ps_files);
  impl.round_origin = impl.scheduled;
  impl.round_base = impl.ps_client().stats(0).version;
  impl.pull_into(model, 0);
}

}  // namespace chorus
