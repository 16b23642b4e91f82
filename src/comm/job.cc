#include "chorus/job.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "chorus/error.h"
#include "comm/elastic_join.h"
#include "comm/mpi_bootstrap.h"
#include "comm/mpi_comm.h"
#include "rendezvous/job_env.h"
#include "util/env.h"
#include "util/log.h"

namespace chorus {

struct Job::Impl {
  JobEnv env;
  std::unique_ptr<TcpStoreServer> server;  // rank 0 of a job whose launcher hosts none
  std::unique_ptr<TcpStoreClient> client;
  std::unique_ptr<PrefixStore> attempt_store;
  CommunicatorOptions options;
  int connections = 0;                           // worlds formed so far
  std::unique_ptr<PrefixStore> reconnect_store;  // the keys of the current world, after the first
  int64_t elastic_round = -1;                    // elastic workers: the current world's round
  std::unique_ptr<PrefixStore> elastic_store;    // that round's keys
  std::unique_ptr<Communicator> world;
};

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Where the ranks of a single-host job without a configured secret meet to share one:
// a directory only this user may enter, one file per job when the launcher names it (a
// Slurm step: its derived port recurs in later steps, whose ranks must not read a file left
// by this one), else one per store port.
std::string shared_secret_path(const JobEnv& env) {
  return user_private_dir() + "/secret-" +
         (env.job_id.empty() ? std::to_string(env.store->port) : env.job_id);
}

Secret read_shared_secret(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = Deadline::after(timeout);
  for (;;) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && st.st_size > 0) return Secret::from_file(path);
    if (deadline.expired()) {
      CHORUS_THROW(TimeoutError, "rank 0 did not publish the job secret at ", path, " in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Ranks on several hosts cannot meet in a local directory: the user must give the secret.
[[noreturn]] void missing_secret(const JobEnv& env) {
  if (env.source == "slurm") {
    CHORUS_THROW(InvalidArgument, "a Slurm step across ", env.cross_size,
                 " nodes needs the job secret: export CHORUS_SECRET_FILE (a file of mode 0600 "
                 "that every node reads, e.g. in your home directory) or CHORUS_SECRET before "
                 "srun, which passes it on to every task (docs/slurm.md)");
  }
  CHORUS_THROW(InvalidArgument,
               "a multi-host job needs a secret: set CHORUS_SECRET or CHORUS_SECRET_FILE "
               "(chorusrun does this for you)");
}

Secret job_secret(const JobEnv& env, const CommunicatorOptions& options) {
  if (!options.secret.empty()) return options.secret;
  if (env.secret) return *env.secret;
  if (env.size == 1 && !env.store) return Secret::generate();
  if (!env.store || !is_loopback(env.store->host)) missing_secret(env);
  std::string path = shared_secret_path(env);
  if (env.rank != 0) return read_shared_secret(path, options.timeout);
  Secret secret = Secret::generate();
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  secret.write_file(tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    CHORUS_THROW(IoError, "cannot publish the job secret at ", path, ": ", std::strerror(errno));
  }
  return secret;
}

// Once the world exists every rank has read the shared secret; a file named after its job
// is of no use to any other, so rank 0 removes it rather than leave one per job behind.
void forget_shared_secret(const JobEnv& env, const CommunicatorOptions& options) {
  if (env.rank != 0 || env.job_id.empty() || !options.secret.empty() || env.secret) return;
  if (!env.store || !is_loopback(env.store->host)) return;
  ::unlink(shared_secret_path(env).c_str());
}

// CHORUS_TRANSPORT=auto in a job mpirun started across hosts: the collectives run through
// MPI, which a cluster's OpenMPI carries over its fastest network (docs/launcher.md, "The
// MPI data path"). CHORUS_TRANSPORT=tcp keeps chorus's own links.
std::string chosen_transport(const JobEnv& env, const std::string& transport) {
  bool across_hosts = env.local_size > 0 && env.local_size < env.size;
  bool mpirun = env.source == "openmpi";
  return transport == "auto" && mpirun && across_hosts && comm::MpiComm::available() ? "mpi"
                                                                                     : transport;
}

}  // namespace

std::unique_ptr<Job> Job::from_env() { return from_env(CommunicatorOptions::from_env()); }

std::unique_ptr<Job> Job::from_env(const CommunicatorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->env = read_job_env();
  const JobEnv& env = impl->env;
  CommunicatorOptions opts = options;
  if (env.meet_through_mpi) {
    mpi::Meeting meeting = mpi::meet_through_mpi(
        env, options.secret.empty() ? env.secret.value_or(Secret()) : options.secret);
    impl->server = std::move(meeting.server);
    impl->env.store = meeting.store;
    opts.secret = meeting.secret;
  } else {
    opts.secret = job_secret(env, options);
  }
  if (opts.store_host.empty() && env.store) opts.store_host = env.store->host;
  opts.transport = chosen_transport(env, opts.transport);

  net::Endpoint store_at = env.store.value_or(net::Endpoint{"127.0.0.1", 0});
  bool host_here = env.rank == 0 && !impl->server && (env.rank0_hosts_store || !env.store);
  if (host_here) {
    impl->server = std::make_unique<TcpStoreServer>(store_at.host, store_at.port, opts.secret);
    store_at.port = impl->server->port();
  }
  CHORUS_CHECK_ARG(store_at.port != 0, "no rendezvous store address for rank ", env.rank, " of ",
                   env.size, " (set CHORUS_STORE_ADDR or MASTER_ADDR/MASTER_PORT)");
  impl->client =
      std::make_unique<TcpStoreClient>(store_at.host, store_at.port, opts.secret, opts.timeout);
  std::string attempt = "attempt/" + std::to_string(env.restart_count) + "/";
  if (env.elastic_id.empty()) {
    impl->client->set(
        "chorus/joined/" + std::to_string(env.restart_count) + "/" + std::to_string(env.rank), "1");
  }
  impl->attempt_store = std::make_unique<PrefixStore>(attempt, *impl->client);
  impl->options = opts;
  auto job = std::unique_ptr<Job>(new Job(std::move(impl)));
  job->reconnect();
  forget_shared_secret(env, options);
  CHORUS_LOG(kInfo, "job") << "rank " << job->world().rank() << " of " << job->world().size()
                           << " joined (" << env.source << ")";
  return job;
}

Job::Job(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Job::~Job() = default;

Communicator& Job::world() {
  CHORUS_CHECK_ARG(impl_->world != nullptr, "the job is disconnected (call reconnect())");
  return *impl_->world;
}

void Job::disconnect() { impl_->world.reset(); }

void Job::reconnect() {
  if (impl_->world) return;
  if (!impl_->env.elastic_id.empty()) return join_next_round();
  Store* store = impl_->attempt_store.get();
  // The first world keeps the attempt's own keys; later ones must not meet stale addresses.
  if (impl_->connections > 0) {
    impl_->reconnect_store = std::make_unique<PrefixStore>(
        "reconnect/" + std::to_string(impl_->connections) + "/", *impl_->attempt_store);
    store = impl_->reconnect_store.get();
  }
  impl_->world = Communicator::create(*store, impl_->env.rank, impl_->env.size, impl_->options);
  ++impl_->connections;
}

// An elastic worker's world comes from the launcher's rounds (comm/elastic_join.h).
void Job::join_next_round() {
  const int64_t seconds = env_int_or("CHORUS_ELASTIC_TIMEOUT_SECONDS", 600);
  comm::ElasticWorld joined =
      comm::join_elastic_round(*impl_->client, impl_->env.elastic_id, impl_->elastic_round,
                               impl_->options, std::chrono::seconds(seconds));
  impl_->world = std::move(joined.world);
  impl_->elastic_store = std::move(joined.store);
  impl_->elastic_round = joined.round;
  impl_->env.rank = impl_->world->rank();
  impl_->env.size = impl_->world->size();
  ++impl_->connections;
}

bool Job::elastic() const { return !impl_->env.elastic_id.empty(); }
int64_t Job::elastic_round() const { return impl_->elastic_round; }

bool Job::newer_round_published() {
  return elastic() && comm::latest_elastic_round(*impl_->client) > impl_->elastic_round;
}

Store& Job::store() { return *impl_->attempt_store; }
int Job::restart_count() const { return impl_->env.restart_count; }

}  // namespace chorus
