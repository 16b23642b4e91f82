// Communicator::create and the options from the environment. Kept apart from the
// collectives so that tests over a hand-made mesh do not need the mesh's rendezvous.
#include "chorus/error.h"
#include "comm/communicator_impl.h"
#include "transport/topology.h"
#include "util/env.h"

namespace chorus {

CommunicatorOptions CommunicatorOptions::from_env() {
  CommunicatorOptions o;
  if (auto v = env_string("CHORUS_TRANSPORT")) {
    CHORUS_CHECK_ARG(*v == "auto" || *v == "tcp" || *v == "shm" || *v == "mpi",
                     "unknown transport '", *v,
                     "' in CHORUS_TRANSPORT (expected auto, tcp, shm or mpi)");
    o.transport = *v;
  }
  transport::MeshOptions mesh = transport::MeshOptions::from_env();
  o.bind_address = mesh.bind_address;
  o.host_id = mesh.host_id;
  o.store_host = mesh.store_host;
  o.shm_ring_bytes = mesh.shm_ring_bytes;
  o.tcp_congestion = mesh.tcp_congestion;
  o.timeout = mesh.timeout;
  if (auto v = env_int("CHORUS_SHM_SINGLE_COPY")) {
    CHORUS_CHECK_ARG(*v == 0 || *v == 1, "CHORUS_SHM_SINGLE_COPY must be 0 or 1, not ", *v);
    o.shm_single_copy = *v == 1;
  }
  if (auto v = env_int("CHORUS_SHM_STREAMING_BYTES")) {
    CHORUS_CHECK_ARG(*v >= 0, "CHORUS_SHM_STREAMING_BYTES must be >= 0, not ", *v);
    o.shm_streaming_bytes = static_cast<size_t>(*v);
  }
  if (auto v = env_string("CHORUS_SHM_PLACEMENT")) {
    CHORUS_CHECK_ARG(*v == "auto" || *v == "near" || *v == "far",
                     "CHORUS_SHM_PLACEMENT must be auto, near or far, not '", *v, "'");
    o.shm_placement = *v == "auto" ? -1 : *v == "far" ? 1 : 0;
  }
  if (auto v = env_int("CHORUS_LOG_PLANS")) {
    CHORUS_CHECK_ARG(*v == 0 || *v == 1, "CHORUS_LOG_PLANS must be 0 or 1, not ", *v);
    o.log_plans = *v == 1;
  }
  if (auto v = env_string("CHORUS_HIERARCHICAL_ALLREDUCE")) {
    CHORUS_CHECK_ARG(*v == "auto" || *v == "0" || *v == "1",
                     "CHORUS_HIERARCHICAL_ALLREDUCE must be auto, 0 or 1, not '", *v, "'");
    o.hierarchical_allreduce = *v == "auto" ? -1 : std::stoi(*v);
  }
  if (auto v = env_string("CHORUS_ALLREDUCE_ALGO")) {
    o.allreduce_algorithm = parse_allreduce_algorithm(*v);
  }
  if (auto secret = Secret::from_env()) o.secret = *secret;
  return o;
}

namespace {

std::string host_id_of(const CommunicatorOptions& options) {
  return options.host_id.empty() ? transport::default_host_id() : options.host_id;
}

// A communicator whose collectives run through MPI (CHORUS_TRANSPORT=mpi).
std::unique_ptr<Communicator> wrap_mpi(std::unique_ptr<comm::MpiComm> mpi,
                                       const CommunicatorOptions& options) {
  return Communicator::Impl::wrap(std::make_unique<Communicator::Impl>(std::move(mpi), options));
}

}  // namespace

std::unique_ptr<Communicator> Communicator::create(Store& store, int rank, int size,
                                                   const CommunicatorOptions& options) {
  CHORUS_CHECK_ARG(size >= 1, "Communicator::create: size ", size, " < 1");
  CHORUS_CHECK_ARG(rank >= 0 && rank < size, "Communicator::create: rank ", rank,
                   " out of range [0, ", size, ")");
  CHORUS_CHECK_ARG(options.timeout.count() > 0, "Communicator::create: timeout must be > 0");
  if (options.transport == "mpi") {
    comm::MpiWait wait{Deadline::after(options.timeout),
                       [] { return std::string("creating the MPI communicator"); }};
    auto comm = wrap_mpi(comm::MpiComm::world(rank, size, host_id_of(options), wait), options);
    comm->impl_->store = &store;
    return comm;
  }
  transport::MeshOptions mesh_options;
  mesh_options.kind = transport::parse_transport_kind(options.transport);
  mesh_options.bind_address = options.bind_address;
  mesh_options.host_id = options.host_id;
  mesh_options.store_host = options.store_host;
  mesh_options.shm_ring_bytes = options.shm_ring_bytes;
  mesh_options.tcp_congestion = options.tcp_congestion;
  mesh_options.timeout = options.timeout;
  mesh_options.secret = options.secret;
  auto mesh = transport::connect_mesh(store, rank, size, mesh_options);
  mesh->set_abort_notes(std::make_shared<transport::AbortNotes>(store, rank));
  auto comm = comm::make_communicator(std::move(mesh), options);
  comm->impl_->store = &store;
  return comm;
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& ranks,
                                                  const std::string& scope) const {
  CHORUS_CHECK_ARG(impl_->store != nullptr,
                   "Communicator::split: this communicator was not created through a store");
  CHORUS_CHECK_ARG(!scope.empty(), "Communicator::split: empty scope");
  int me = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    CHORUS_CHECK_ARG(ranks[i] >= 0 && ranks[i] < size(), "Communicator::split: rank ", ranks[i],
                     " out of range [0, ", size(), ")");
    CHORUS_CHECK_ARG(i == 0 || ranks[i] > ranks[i - 1],
                     "Communicator::split: ranks must be ascending and distinct");
    if (ranks[i] == rank()) me = static_cast<int>(i);
  }
  CHORUS_CHECK_ARG(me >= 0, "Communicator::split: rank ", rank(), " is not among the ranks");
  if (impl_->mpi) {
    comm::MpiWait wait{Deadline::after(impl_->options.timeout),
                       [&] { return "splitting the MPI communicator (scope " + scope + ")"; }};
    auto child =
        wrap_mpi(impl_->mpi->split(ranks, host_id_of(impl_->options), wait), impl_->options);
    child->impl_->store = impl_->store;  // unused by MPI, but split()'s contract asks for it
    return child;
  }
  auto store = std::make_unique<PrefixStore>("split/" + scope + "/", *impl_->store);
  auto child = create(*store, me, static_cast<int>(ranks.size()), impl_->options);
  child->impl_->owned_store = std::move(store);
  return child;
}

}  // namespace chorus
