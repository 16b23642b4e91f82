// The collectives: argument checks, the call's deadline and name, algorithm choice, and
// breaking the communicator on I/O errors and timeouts.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "chorus/error.h"
#include "comm/algorithms.h"
#include "comm/communicator_impl.h"
#include "comm/placement.h"
#include "comm/ring.h"
#include "util/deadline.h"
#include "util/log.h"

namespace chorus {
namespace {

constexpr const char* kAlgoNames[] = {"auto", "ring", "halving_doubling", "recursive_doubling"};

}  // namespace

std::string OpInfo::text() const {
  std::ostringstream out;
  out << op << " of " << count << ' ' << dtype_name(type) << " (rank " << rank << " of " << size
      << ')';
  if (reduce) out << ' ' << reduce;
  if (algorithm) out << ' ' << algorithm;
  if (root >= 0) out << " from root " << root;
  return out.str();
}

namespace {

// Total elements of `counts`, checked so that the byte size fits in size_t.
size_t checked_total(const std::vector<size_t>& counts, DataType type, const char* op) {
  size_t total = 0, limit = SIZE_MAX / dtype_size(type);
  for (size_t c : counts) {
    CHORUS_CHECK_ARG(c <= limit - total, op, ": counts overflow the address space");
    total += c;
  }
  return total;
}

void check_buffer(const void* p, size_t count, const char* op, const char* name) {
  CHORUS_CHECK_ARG(p != nullptr || count == 0, op, ": ", name, " is null with ", count,
                   " elements");
}

// An allreduce's op: element-wise, or Adasum on floats over a power-of-two number of ranks.
void check_reduce_op(ReduceOp op, DataType type, int ranks) {
  if (op != ReduceOp::kAdasum) {
    CHORUS_CHECK_ARG(static_cast<size_t>(op) < kNumReduceOps, "allreduce: unknown op ",
                     static_cast<int>(op));
    return;
  }
  CHORUS_CHECK_ARG(is_floating_point(type), "allreduce: Adasum combines floating-point ",
                   "tensors (float16, bfloat16, float32, float64), not ", dtype_name(type));
  CHORUS_CHECK_ARG((ranks & (ranks - 1)) == 0, "allreduce: Adasum needs a power-of-two ",
                   "number of ranks (it combines them pairwise), not ", ranks);
}

// Packs the parts into the staging buffer, runs `body` on it, and unpacks the result.
template <typename Body>
void staged(comm::Workspace& ws, const std::vector<BufferPart>& parts, size_t total, size_t es,
            Body&& body) {
  char* buffer = ws.staging.get(total * es);
  size_t at = 0;
  for (const BufferPart& part : parts) {
    if (part.count > 0) std::memcpy(buffer + at, part.send, part.count * es);
    at += part.count * es;
  }
  body(buffer);
  at = 0;
  for (const BufferPart& part : parts) {
    if (part.count > 0) std::memcpy(part.recv, buffer + at, part.count * es);
    at += part.count * es;
  }
}

void check_counts(const std::vector<size_t>& counts, int size, const char* op) {
  CHORUS_CHECK_ARG(counts.size() == static_cast<size_t>(size), op, ": ", counts.size(),
                   " counts for ", size, " ranks");
}

}  // namespace

AllreduceAlgorithm parse_allreduce_algorithm(const std::string& name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kAlgoNames[i]) return static_cast<AllreduceAlgorithm>(i);
  }
  CHORUS_THROW(InvalidArgument, "unknown allreduce algorithm '", name,
               "' (expected auto, ring, halving_doubling or recursive_doubling)");
}

const char* allreduce_algorithm_name(AllreduceAlgorithm algo) {
  auto i = static_cast<size_t>(algo);
  return i < 4 ? kAlgoNames[i] : "unknown";
}

void Communicator::Impl::check_usable(const char* op) const {
  if (broken.load()) CHORUS_THROW(IoError, op, ": communicator is broken");
}

bool Communicator::Impl::peers_readable(comm::Context& ctx) {
  if (mpi || mesh->size() == 1 || mesh->topology().local_size != mesh->size()) return false;
  if (single_copy_agreed < 0) single_copy_agreed = comm::agree_single_copy(ctx) ? 1 : 0;
  return single_copy_agreed == 1;
}

bool Communicator::Impl::learns_placement(const comm::Context& ctx) const {
  return options.shm_placement < 0 && ctx.size() == 2;
}

bool Communicator::Impl::cores_far(comm::Context& ctx) {
  if (options.shm_placement >= 0) return options.shm_placement == 1;
  return learns_placement(ctx) && comm::agree_far(ctx, placement);
}

void Communicator::Impl::run_streaming(comm::Context& ctx, bool far, const void* send, void* recv,
                                       size_t count, DataType type, ReduceOp op) {
  auto start = std::chrono::steady_clock::now();
  comm::allreduce_ring(ctx, send, recv, count, type, op,
                       far ? comm::RingMode::kStreamingFar : comm::RingMode::kStreaming);
  if (learns_placement(ctx) && ctx.rank() == 0) {
    placement.ran(count * dtype_size(type), std::chrono::steady_clock::now() - start);
  }
}

comm::AllreduceFacts Communicator::Impl::allreduce_facts(comm::Context& ctx, size_t bytes,
                                                         bool parts, const void* send, void* recv,
                                                         size_t count, DataType type, ReduceOp op) {
  const transport::Topology& t = mesh->topology();
  comm::AllreduceFacts f;
  f.bytes = bytes;
  f.parts = parts;
  f.size = t.size;
  f.one_host = t.local_size == t.size;
  f.shm_links = f.one_host && options.transport != "tcp";
  f.has_shared = shared.active();
  f.uniform_hosts = comm::hosts_are_uniform(t);
  f.peers_readable = [this, &ctx] { return peers_readable(ctx); };
  f.shared_buffers = [=, &ctx] { return shared.handshake(ctx, send, recv, count, type, op); };
  f.cores_far = [this, &ctx] { return cores_far(ctx); };
  if (!parts) f.in_place = [=, &ctx] { return comm::every_rank_in_place(ctx, send, recv); };
  return f;
}

comm::AllreducePlan Communicator::Impl::plan(comm::Context& ctx, OpInfo& info,
                                             const comm::AllreduceFacts& facts) {
  comm::AllreducePlan p = comm::plan_allreduce(facts, options);
  info.algorithm = last_plan = comm::allreduce_path_name(p.path);
  // Asked for by name (CHORUS_LOG_PLANS), so written whatever CHORUS_LOG_LEVEL says.
  if (options.log_plans) {
    log_line(LogLevel::kInfo, "comm",
             "rank " + std::to_string(ctx.rank()) + ": " + info.text() + ": " + p.why);
  }
  return p;
}

comm::RingMode Communicator::Impl::ring_mode(comm::Context& ctx, OpInfo& info, size_t bytes) {
  comm::RingMode mode = comm::plan_ring(bytes, options, [&] { return peers_readable(ctx); });
  info.algorithm = last_plan = comm::ring_mode_name(mode);
  if (options.log_plans) {
    log_line(LogLevel::kInfo, "comm", "rank " + std::to_string(ctx.rank()) + ": " + info.text());
  }
  return mode;
}

void Communicator::Impl::run_allreduce(comm::Context& ctx, const comm::AllreducePlan& plan,
                                       const void* send, void* recv, size_t count, DataType type,
                                       ReduceOp op) {
  using comm::AllreducePath;
  using comm::RingMode;
  switch (plan.path) {
    case AllreducePath::kLocal:
      if (send != recv) std::memcpy(recv, send, count * dtype_size(type));
      return;
    case AllreducePath::kSharedMemory:
      return shared.run(ctx, count, type, op);
    case AllreducePath::kDirectSingleCopy:
      return comm::allreduce_direct(ctx, {BufferPart{send, recv, count}}, count, type, op);
    case AllreducePath::kRingStreaming:
    case AllreducePath::kRingStreamingFar:
      return run_streaming(ctx, plan.path == AllreducePath::kRingStreamingFar, send, recv, count,
                           type, op);
    case AllreducePath::kRingSingleCopy:
      return comm::allreduce_ring(ctx, send, recv, count, type, op, RingMode::kSingleCopy);
    case AllreducePath::kRing:
      return comm::allreduce_ring(ctx, send, recv, count, type, op);
    case AllreducePath::kHalvingDoubling:
      return comm::allreduce_halving_doubling(ctx, send, recv, count, type, op);
    case AllreducePath::kRecursiveDoubling:
      return comm::allreduce_recursive_doubling(ctx, send, recv, count, type, op);
    case AllreducePath::kHierarchical:
      return comm::allreduce_hierarchical(ctx, mesh->topology(), send, recv, count, type, op);
  }
}

void Communicator::Impl::fail(std::string_view reason) noexcept {
  broken.store(true);
  if (mesh) mesh->abort(reason);  // MPI's operations cannot be aborted: mpirun ends the job
}

template <typename Body>
void Communicator::Impl::run(const OpInfo& info, Body&& body) {
  transport::Progress progress(Deadline::after(options.timeout), [&info] { return info.text(); });
  comm::Context ctx{*mesh, progress, workspace};
  try {
    body(ctx);
  } catch (const IoError& e) {
    fail(e.what());
    throw;
  } catch (const TimeoutError& e) {
    fail(e.what());
    throw;
  }
}

template <typename Body>
void Communicator::Impl::run_mpi(OpInfo info, Body&& body) {
  info.algorithm = last_plan = "mpi";
  if (options.log_plans) {
    log_line(LogLevel::kInfo, "comm", "rank " + std::to_string(info.rank) + ": " + info.text());
  }
  try {
    body(comm::MpiWait{Deadline::after(options.timeout), [&info] { return info.text(); }});
  } catch (const IoError&) {
    broken.store(true);
    throw;
  } catch (const TimeoutError&) {
    broken.store(true);
    throw;
  }
}

namespace comm {
std::unique_ptr<Communicator> make_communicator(std::unique_ptr<transport::Mesh> mesh,
                                                const CommunicatorOptions& options) {
  CHORUS_CHECK_ARG(mesh != nullptr, "make_communicator: null mesh");
  return Communicator::Impl::wrap(std::make_unique<Communicator::Impl>(std::move(mesh), options));
}
}  // namespace comm

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->topology().rank; }
int Communicator::size() const { return impl_->topology().size; }
int Communicator::local_rank() const { return impl_->topology().local_rank; }
int Communicator::local_size() const { return impl_->topology().local_size; }
int Communicator::cross_rank() const { return impl_->topology().cross_rank; }
int Communicator::cross_size() const { return impl_->topology().cross_size; }
const CommunicatorOptions& Communicator::options() const { return impl_->options; }
bool Communicator::broken() const { return impl_->broken.load(); }
bool Communicator::single_copy() const { return impl_->single_copy_agreed == 1; }
const char* Communicator::last_plan() const { return impl_->last_plan; }

bool Communicator::allreduce_reads_parts_in_place() {
  impl_->check_usable("allreduce");
  if (size() == 1 || impl_->mpi) return false;
  comm::AllreducePlan plan;
  impl_->run(OpInfo{"allreduce planning", 0, DataType::kUInt8, rank(), size()},
             [&](comm::Context& ctx) {
               auto facts = impl_->allreduce_facts(ctx, comm::kSingleCopyMinBytes, true, nullptr,
                                                   nullptr, 0, DataType::kUInt8, ReduceOp::kSum);
               plan = comm::plan_allreduce(facts, impl_->options);
             });
  return plan.path == comm::AllreducePath::kDirectSingleCopy ||
         plan.path == comm::AllreducePath::kRingSingleCopy;
}
uint64_t Communicator::shared_memory_allreduces() const { return impl_->shared.completed(); }
bool Communicator::in_shared_memory(const void* p, size_t bytes) const {
  uint64_t id = 0, offset = 0;
  impl_->shared.locate(p, bytes, &id, &offset);
  return id != 0;
}
void Communicator::abort(std::string_view reason) noexcept { impl_->fail(reason); }

void Communicator::Impl::adasum(OpInfo& info, const std::vector<BufferPart>& parts, DataType type) {
  if (mpi) {  // MPI has no Adasum: gather every rank's tensors, combine here
    return run_mpi(info, [&](const comm::MpiWait& wait) {
      const int p = mpi->topology().size;
      const size_t es = dtype_size(type);
      for (const BufferPart& part : parts) {
        if (part.count == 0) continue;
        CHORUS_CHECK_ARG(part.count <= SIZE_MAX / es / static_cast<size_t>(p),
                         "allreduce: Adasum of ", part.count, " elements over ", p,
                         " ranks overflows");
        char* gathered = workspace.staging.get(part.count * es * p);
        uniform_counts.assign(p, part.count);
        mpi->allgatherv(part.send, gathered, uniform_counts, type, wait);
        comm::adasum_gathered(gathered, part.recv, part.count, p, type, workspace.accumulator);
      }
    });
  }
  info.algorithm = last_plan = "adasum_vhdd";
  if (options.log_plans) {
    log_line(LogLevel::kInfo, "comm",
             "rank " + std::to_string(info.rank) + ": " + info.text() + " (" +
                 std::to_string(parts.size()) + " tensors)");
  }
  run(info, [&](comm::Context& ctx) { comm::adasum_vhdd(ctx, parts, type); });
}

void Communicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                             ReduceOp op) {
  size_t es = dtype_size(type);  // validates type
  check_reduce_op(op, type, size());
  CHORUS_CHECK_ARG(count <= SIZE_MAX / es, "allreduce: count ", count, " overflows");
  check_buffer(send, count, "allreduce", "send");
  check_buffer(recv, count, "allreduce", "recv");
  impl_->check_usable("allreduce");
  if (count == 0) return;
  if (size() == 1) {
    if (send != recv) std::memcpy(recv, send, count * es);
    return;
  }
  OpInfo info{"allreduce", count, type, rank(), size()};
  info.reduce = reduce_op_name(op);
  if (op == ReduceOp::kAdasum) return impl_->adasum(info, {{send, recv, count}}, type);
  if (impl_->mpi) {
    return impl_->run_mpi(info, [&](const comm::MpiWait& wait) {
      impl_->mpi->allreduce(send, recv, count, type, op, wait);
    });
  }
  impl_->run(info, [&](comm::Context& ctx) {
    auto facts = impl_->allreduce_facts(ctx, count * es, false, send, recv, count, type, op);
    impl_->run_allreduce(ctx, impl_->plan(ctx, info, facts), send, recv, count, type, op);
  });
}

void Communicator::allreduce(const std::vector<BufferPart>& parts, DataType type, ReduceOp op) {
  size_t es = dtype_size(type);
  check_reduce_op(op, type, size());
  size_t total = 0;
  for (const BufferPart& part : parts) {
    CHORUS_CHECK_ARG(part.count <= SIZE_MAX / es - total, "allreduce: the parts' counts overflow");
    check_buffer(part.send, part.count, "allreduce", "a part's send");
    check_buffer(part.recv, part.count, "allreduce", "a part's recv");
    total += part.count;
  }
  impl_->check_usable("allreduce");
  if (total == 0) return;
  if (size() == 1) {
    for (const BufferPart& part : parts) {
      if (part.count > 0 && part.send != part.recv) {
        std::memcpy(part.recv, part.send, part.count * es);
      }
    }
    return;
  }
  OpInfo info{"allreduce", total, type, rank(), size()};
  info.reduce = reduce_op_name(op);
  if (op == ReduceOp::kAdasum) return impl_->adasum(info, parts, type);
  if (impl_->mpi) {
    return impl_->run_mpi(info, [&](const comm::MpiWait& wait) {
      if (parts.size() == 1) {
        return impl_->mpi->allreduce(parts[0].send, parts[0].recv, total, type, op, wait);
      }
      staged(impl_->workspace, parts, total, es,
             [&](char* buffer) { impl_->mpi->allreduce(buffer, buffer, total, type, op, wait); });
    });
  }
  impl_->run(info, [&](comm::Context& ctx) {
    auto facts = impl_->allreduce_facts(ctx, total * es, true, nullptr, nullptr, total, type, op);
    comm::AllreducePlan plan = impl_->plan(ctx, info, facts);
    if (plan.path == comm::AllreducePath::kDirectSingleCopy) {
      return comm::allreduce_direct(ctx, parts, total, type, op);
    }
    if (plan.path == comm::AllreducePath::kRingSingleCopy) {
      return comm::allreduce_ring_parts(ctx, parts, total, type, op);
    }
    staged(ctx.ws, parts, total, es,
           [&](char* buffer) { impl_->run_allreduce(ctx, plan, buffer, buffer, total, type, op); });
  });
}

void Communicator::allgatherv(const void* send, void* recv, const std::vector<size_t>& counts,
                              DataType type) {
  check_counts(counts, size(), "allgatherv");
  size_t total = checked_total(counts, type, "allgatherv");
  check_buffer(send, counts[rank()], "allgatherv", "send");
  check_buffer(recv, total, "allgatherv", "recv");
  impl_->check_usable("allgatherv");
  if (total == 0) return;
  OpInfo info{"allgatherv", total, type, rank(), size()};
  if (impl_->mpi) {
    return impl_->run_mpi(info, [&](const comm::MpiWait& wait) {
      impl_->mpi->allgatherv(send, recv, counts, type, wait);
    });
  }
  impl_->run(info, [&](comm::Context& ctx) {
    if (size() == 1) {
      if (send != recv) std::memmove(recv, send, total * dtype_size(type));
      return;
    }
    auto mode = impl_->ring_mode(ctx, info, total * dtype_size(type));
    comm::allgatherv_ring(ctx, send, recv, counts, type, mode);
  });
}

void Communicator::allgather(const void* send, void* recv, size_t count, DataType type) {
  impl_->uniform_counts.assign(size(), count);  // reused: no allocation in steady state
  allgatherv(send, recv, impl_->uniform_counts, type);
}

void Communicator::broadcast(void* buffer, size_t count, DataType type, int root) {
  size_t es = dtype_size(type);
  CHORUS_CHECK_ARG(root >= 0 && root < size(), "broadcast: root ", root, " out of range [0, ",
                   size(), ")");
  CHORUS_CHECK_ARG(count <= SIZE_MAX / es, "broadcast: count ", count, " overflows");
  check_buffer(buffer, count, "broadcast", "buffer");
  impl_->check_usable("broadcast");
  if (count == 0 || size() == 1) return;
  OpInfo info{"broadcast", count, type, rank(), size()};
  info.root = root;
  if (impl_->mpi) {
    return impl_->run_mpi(info, [&](const comm::MpiWait& wait) {
      impl_->mpi->broadcast(buffer, count, type, root, wait);
    });
  }
  impl_->run(info, [&](comm::Context& ctx) { comm::broadcast(ctx, buffer, count * es, root); });
}

void Communicator::reduce_scatter(const void* send, void* recv,
                                  const std::vector<size_t>& recv_counts, DataType type,
                                  ReduceOp op) {
  check_counts(recv_counts, size(), "reduce_scatter");
  CHORUS_CHECK_ARG(op != ReduceOp::kAdasum, "reduce_scatter: Adasum runs in allreduce only");
  CHORUS_CHECK_ARG(static_cast<size_t>(op) < kNumReduceOps, "reduce_scatter: unknown op");
  size_t total = checked_total(recv_counts, type, "reduce_scatter");
  check_buffer(send, total, "reduce_scatter", "send");
  check_buffer(recv, recv_counts[rank()], "reduce_scatter", "recv");
  impl_->check_usable("reduce_scatter");
  if (total == 0) return;
  OpInfo info{"reduce_scatter", total, type, rank(), size()};
  info.reduce = reduce_op_name(op);
  if (impl_->mpi) {
    return impl_->run_mpi(info, [&](const comm::MpiWait& wait) {
      impl_->mpi->reduce_scatter(send, recv, recv_counts, type, op, wait);
    });
  }
  impl_->run(info, [&](comm::Context& ctx) {
    if (size() == 1) {
      if (send != recv) std::memcpy(recv, send, total * dtype_size(type));
      return;
    }
    auto mode = impl_->ring_mode(ctx, info, total * dtype_size(type));
    comm::reduce_scatter_ring(ctx, send, recv, recv_counts, type, op, mode);
  });
}

SharedBuffer Communicator::alloc_shared(size_t bytes, SharedPages pages) {
  CHORUS_CHECK_ARG(bytes > 0 && bytes <= transport::shm::kMaxRegionBytes, "alloc_shared: ", bytes,
                   " bytes (must be 1 .. ", transport::shm::kMaxRegionBytes, ")");
  impl_->check_usable("alloc_shared");
  if (impl_->mpi) {  // no memory is shared; the sizes are still compared, as promised
    std::vector<int64_t> asked(size());
    auto mine = static_cast<int64_t>(bytes);
    allgather(&mine, asked.data(), 1, DataType::kInt64);
    for (int r = 0; r < size(); ++r) {
      CHORUS_CHECK_ARG(asked[r] == mine, "alloc_shared: rank ", r, " asked for ", asked[r],
                       " bytes, rank ", rank(), " for ", bytes);
    }
    return SharedBuffer(comm::SharedMemory::private_allocation(rank(), size(), bytes, pages));
  }
  std::shared_ptr<comm::SharedAllocation> allocation;
  impl_->run(OpInfo{"alloc_shared", bytes, DataType::kUInt8, rank(), size()},
             [&](comm::Context& ctx) {
               allocation = impl_->shared.allocate(ctx, bytes, impl_->peers_readable(ctx), pages);
             });
  return SharedBuffer(std::move(allocation));
}

void Communicator::alltoallv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                             const std::vector<size_t>& recv_counts, DataType type) {
  check_counts(send_counts, size(), "alltoallv");
  check_counts(recv_counts, size(), "alltoallv");
  size_t send_total = checked_total(send_counts, type, "alltoallv");
  size_t recv_total = checked_total(recv_counts, type, "alltoallv");
  CHORUS_CHECK_ARG(send_counts[rank()] == recv_counts[rank()], "alltoallv: rank ", rank(),
                   " sends itself ", send_counts[rank()], " elements but expects ",
                   recv_counts[rank()]);
  check_buffer(send, send_total, "alltoallv", "send");
  check_buffer(recv, recv_total, "alltoallv", "recv");
  impl_->check_usable("alltoallv");
  if (send_total == 0 && recv_total == 0) return;
  OpInfo info{"alltoallv", send_total, type, rank(), size()};
  if (impl_->mpi) {
    return impl_->run_mpi(info, [&](const comm::MpiWait& wait) {
      impl_->mpi->alltoallv(send, send_counts, recv, recv_counts, type, wait);
    });
  }
  impl_->run(info, [&](comm::Context& ctx) {
    comm::alltoallv_pairwise(ctx, send, send_counts, recv, recv_counts, type);
  });
}

void Communicator::alltoall(const void* send, void* recv, size_t count_per_rank, DataType type) {
  impl_->uniform_counts.assign(size(), count_per_rank);
  alltoallv(send, impl_->uniform_counts, recv, impl_->uniform_counts, type);
}

void Communicator::barrier() {
  impl_->check_usable("barrier");
  if (size() == 1) return;
  OpInfo info{"barrier", 0, DataType::kUInt8, rank(), size()};
  if (impl_->mpi) {
    return impl_->run_mpi(info, [&](const comm::MpiWait& wait) { impl_->mpi->barrier(wait); });
  }
  impl_->run(info, [&](comm::Context& ctx) { comm::barrier_dissemination(ctx); });
}

}  // namespace chorus
