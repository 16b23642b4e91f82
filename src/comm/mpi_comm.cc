#include "comm/mpi_comm.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <string>

#include "chorus/error.h"
#include "comm/mpi_service.h"
#include "transport/topology.h"
#include "util/reduce.h"

namespace chorus::comm {

struct MpiComm::State {
  MPI_Comm comm = MPI_COMM_NULL;
  transport::Topology topology;
  // A v-collective's int counts and displacements, and a send buffer staged because it
  // overlaps recv: members, so that they outlive the call even when its caller times out.
  std::vector<int> counts, displs, recv_counts, recv_displs;
  std::vector<char> staging;
};

namespace {

// Elements per MPI call of allreduce and broadcast: MPI counts are ints, and 2^28 keeps
// byte offsets inside implementations far from INT_MAX too.
constexpr size_t kMaxChunk = size_t{1} << 28;
// Bytes of a host id in the topology exchange (longer ids are cut: hostname, boot id and
// network namespace fit in far less).
constexpr int kHostIdBytes = 256;

// float16 and bfloat16 have no MPI type: each gets a type of its own, so that a reduction
// knows which it reduces, and chorus's kernels reduce them.
struct HalfTypes {
  MPI_Datatype f16 = MPI_DATATYPE_NULL;
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Op ops[kNumReduceOps] = {};  // by ReduceOp
};
HalfTypes halves;  // made once, on the MPI thread

template <ReduceOp kOp>
void reduce_halves(void* in, void* inout, int* len, MPI_Datatype* type) {
  DataType t = *type == halves.bf16 ? DataType::kBFloat16 : DataType::kFloat16;
  reduce_into(t, kOp, inout, in, static_cast<size_t>(*len));
}

void make_half_types() {
  if (halves.f16 != MPI_DATATYPE_NULL) return;
  for (MPI_Datatype* t : {&halves.f16, &halves.bf16}) {
    mpi::check(MPI_Type_contiguous(1, MPI_UINT16_T, t), "MPI_Type_contiguous");
    mpi::check(MPI_Type_commit(t), "MPI_Type_commit");
  }
  auto make = [](MPI_User_function* fn, ReduceOp op) {
    mpi::check(MPI_Op_create(fn, 1, &halves.ops[static_cast<int>(op)]), "MPI_Op_create");
  };
  make(&reduce_halves<ReduceOp::kSum>, ReduceOp::kSum);
  halves.ops[static_cast<int>(ReduceOp::kAverage)] = halves.ops[static_cast<int>(ReduceOp::kSum)];
  make(&reduce_halves<ReduceOp::kMin>, ReduceOp::kMin);
  make(&reduce_halves<ReduceOp::kMax>, ReduceOp::kMax);
  make(&reduce_halves<ReduceOp::kProduct>, ReduceOp::kProduct);
}

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
      return halves.f16;
    case DataType::kBFloat16:
      return halves.bf16;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
  }
  CHORUS_THROW(InvalidArgument, "no MPI type for data type ", static_cast<int>(type));
}

// kAverage reduces as a sum; the caller divides.
MPI_Op mpi_op(DataType type, ReduceOp op) {
  const bool elementwise = static_cast<int>(op) < kNumReduceOps;  // not kAdasum
  if (elementwise && (type == DataType::kFloat16 || type == DataType::kBFloat16)) {
    return halves.ops[static_cast<int>(op)];
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kAdasum:  // not element-wise: the Communicator runs it (adasum_gathered)
      break;
  }
  CHORUS_THROW(InvalidArgument, "no MPI op for reduce op ", static_cast<int>(op));
}

// On the MPI thread: every rank's host id, and the topology computed from them.
void exchange_topology(MpiComm::State& s, const std::string& host_id) {
  int rank = 0, size = 0;
  mpi::check(MPI_Comm_rank(s.comm, &rank), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(s.comm, &size), "MPI_Comm_size");
  std::vector<char> mine(kHostIdBytes, '\0'), all(static_cast<size_t>(kHostIdBytes) * size);
  std::memcpy(mine.data(), host_id.data(), std::min<size_t>(host_id.size(), kHostIdBytes - 1));
  mpi::check(MPI_Allgather(mine.data(), kHostIdBytes, MPI_CHAR, all.data(), kHostIdBytes, MPI_CHAR,
                           s.comm),
             "MPI_Allgather of host ids");
  std::vector<std::string> hosts(size);
  for (int r = 0; r < size; ++r) hosts[r] = std::string(all.data() + r * kHostIdBytes);
  s.topology = transport::compute_topology(rank, hosts);
}

// The same tag on every member of a split, different for different member lists.
int split_tag(const std::vector<int>& ranks) {
  uint32_t h = 2166136261u;
  for (int r : ranks) h = (h ^ static_cast<uint32_t>(r)) * 16777619u;
  return static_cast<int>(h % 32000u) + 1;  // within every MPI's MPI_TAG_UB (>= 32767)
}

// Fills int counts and displacements from `counts`; InvalidArgument past MPI's int.
void int_counts(const std::vector<size_t>& counts, std::vector<int>& out, std::vector<int>& displs,
                const char* op) {
  out.resize(counts.size());
  displs.resize(counts.size());
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    CHORUS_CHECK_ARG(counts[i] <= static_cast<size_t>(INT_MAX) - at, op,
                     " over MPI (CHORUS_TRANSPORT=mpi) moves at most 2^31-1 elements in one "
                     "call (MPI's counts are ints)");
    out[i] = static_cast<int>(counts[i]);
    displs[i] = static_cast<int>(at);
    at += counts[i];
  }
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// `send`, or a copy of it in s.staging when it overlaps [recv, recv + recv_bytes): MPI
// forbids aliased buffers other than MPI_IN_PLACE.
const void* unaliased(MpiComm::State& s, const void* send, size_t bytes, const void* recv,
                      size_t recv_bytes) {
  if (!overlaps(send, bytes, recv, recv_bytes)) return send;
  s.staging.assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
  return s.staging.data();
}

using Requests = std::vector<MPI_Request>;

// Starts one nonblocking collective on the MPI thread and waits for it.
void run_one(const std::function<int(MPI_Request*)>& start, const char* name, const MpiWait& wait) {
  mpi::Service::get().wait_for(
      [start, name] {
        Requests requests(1);
        mpi::check(start(&requests[0]), name);
        return requests;
      },
      wait.deadline, wait.describe);
}

}  // namespace

bool MpiComm::available() { return true; }

bool MpiComm::threads_supported() {
  int provided = MPI_THREAD_SINGLE;
  mpi::Service::get().call([&] { MPI_Query_thread(&provided); },
                           Deadline::after(std::chrono::seconds(60)),
                           [] { return std::string("MPI_Query_thread"); });
  return provided == MPI_THREAD_MULTIPLE;
}

MpiComm::MpiComm(std::unique_ptr<State> state) : state_(std::move(state)) {
  mpi::Service::get().hold();
}

MpiComm::~MpiComm() {
  mpi::Service& service = mpi::Service::get();
  service.release();
  if (!service.running()) return;  // MPI is finalized (or about to be) at exit
  MPI_Comm comm = state_->comm;
  try {  // MPI_Comm_free is local: it returns at once, pending operations finish first
    service.call([comm]() mutable { MPI_Comm_free(&comm); }, Deadline::never(),
                 [] { return std::string("MPI_Comm_free"); });
  } catch (const Error&) {
  }
}

const transport::Topology& MpiComm::topology() const { return state_->topology; }

std::unique_ptr<MpiComm> MpiComm::world(int rank, int size, const std::string& host_id,
                                        const MpiWait& wait) {
  mpi::Service& service = mpi::Service::get();
  auto state = std::make_shared<State>();
  service.call(
      [state, host_id] {
        make_half_types();
        mpi::check(MPI_Comm_dup(MPI_COMM_WORLD, &state->comm), "MPI_Comm_dup");
        // Errors come back as codes (mpi::check: IoError), never as an abort of the job.
        MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN);
        exchange_topology(*state, host_id);
      },
      wait.deadline, wait.describe);
  auto comm = std::unique_ptr<MpiComm>(new MpiComm(std::make_unique<State>(std::move(*state))));
  const transport::Topology& t = comm->topology();
  CHORUS_CHECK_ARG(t.rank == rank && t.size == size, "CHORUS_TRANSPORT=mpi: this process is rank ",
                   t.rank, " of ", t.size, " in MPI_COMM_WORLD but rank ", rank, " of ", size,
                   " of the job: start the job with mpirun (chorusrun --mpi, or srun with PMIx)");
  return comm;
}

std::unique_ptr<MpiComm> MpiComm::split(const std::vector<int>& ranks, const std::string& host_id,
                                        const MpiWait& wait) const {
  auto state = std::make_shared<State>();
  MPI_Comm parent = state_->comm;
  mpi::Service::get().call(
      [state, parent, ranks, host_id] {
        MPI_Group all = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
        mpi::check(MPI_Comm_group(parent, &all), "MPI_Comm_group");
        int rc = MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &group);
        if (rc == MPI_SUCCESS) {
          rc = MPI_Comm_create_group(parent, group, split_tag(ranks), &state->comm);
          MPI_Group_free(&group);
        }
        MPI_Group_free(&all);
        mpi::check(rc, "MPI_Comm_create_group");
        MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN);
        exchange_topology(*state, host_id);
      },
      wait.deadline, wait.describe);
  return std::unique_ptr<MpiComm>(new MpiComm(std::make_unique<State>(std::move(*state))));
}

void MpiComm::allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                        const MpiWait& wait) {
  MPI_Comm comm = state_->comm;
  size_t es = dtype_size(type);
  mpi::Service::get().wait_for(
      [=] {
        MPI_Datatype t = mpi_type(type);
        MPI_Op o = mpi_op(type, op);
        Requests requests;
        for (size_t at = 0; at < count; at += kMaxChunk) {
          int n = static_cast<int>(std::min(kMaxChunk, count - at));
          const void* in = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + at * es;
          requests.emplace_back();
          mpi::check(MPI_Iallreduce(in, static_cast<char*>(recv) + at * es, n, t, o, comm,
                                    &requests.back()),
                     "MPI_Iallreduce");
        }
        return requests;
      },
      wait.deadline, wait.describe);
  if (op == ReduceOp::kAverage) divide(type, recv, count, state_->topology.size);
}

void MpiComm::broadcast(void* buffer, size_t count, DataType type, int root, const MpiWait& wait) {
  MPI_Comm comm = state_->comm;
  size_t es = dtype_size(type);
  mpi::Service::get().wait_for(
      [=] {
        Requests requests;
        for (size_t at = 0; at < count; at += kMaxChunk) {
          int n = static_cast<int>(std::min(kMaxChunk, count - at));
          requests.emplace_back();
          mpi::check(MPI_Ibcast(static_cast<char*>(buffer) + at * es, n, mpi_type(type), root, comm,
                                &requests.back()),
                     "MPI_Ibcast");
        }
        return requests;
      },
      wait.deadline, wait.describe);
}

void MpiComm::allgatherv(const void* send, void* recv, const std::vector<size_t>& counts,
                         DataType type, const MpiWait& wait) {
  State* s = state_.get();
  int me = s->topology.rank;
  size_t es = dtype_size(type);
  int_counts(counts, s->counts, s->displs, "allgatherv");
  size_t total = static_cast<size_t>(s->displs.back()) + counts.back();
  char* mine = static_cast<char*>(recv) + static_cast<size_t>(s->displs[me]) * es;
  const void* in =
      send == mine ? MPI_IN_PLACE : unaliased(*s, send, counts[me] * es, recv, total * es);
  run_one(
      [=](MPI_Request* r) {
        MPI_Datatype t = mpi_type(type);
        return MPI_Iallgatherv(in, s->counts[me], t, recv, s->counts.data(), s->displs.data(), t,
                               s->comm, r);
      },
      "MPI_Iallgatherv", wait);
}

void MpiComm::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& recv_counts,
                             DataType type, ReduceOp op, const MpiWait& wait) {
  State* s = state_.get();
  int me = s->topology.rank;
  size_t es = dtype_size(type);
  int_counts(recv_counts, s->counts, s->displs, "reduce_scatter");
  size_t total = static_cast<size_t>(s->displs.back()) + recv_counts.back();
  // In place (send == recv): MPI reads the whole input from recv and writes block `me` at
  // its start, as Communicator::reduce_scatter does.
  const void* in =
      send == recv ? MPI_IN_PLACE : unaliased(*s, send, total * es, recv, recv_counts[me] * es);
  run_one(
      [=](MPI_Request* r) {
        return MPI_Ireduce_scatter(in, recv, s->counts.data(), mpi_type(type), mpi_op(type, op),
                                   s->comm, r);
      },
      "MPI_Ireduce_scatter", wait);
  if (op == ReduceOp::kAverage) divide(type, recv, recv_counts[me], s->topology.size);
}

void MpiComm::alltoallv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                        const std::vector<size_t>& recv_counts, DataType type,
                        const MpiWait& wait) {
  State* s = state_.get();
  size_t es = dtype_size(type);
  int_counts(send_counts, s->counts, s->displs, "alltoallv");
  int_counts(recv_counts, s->recv_counts, s->recv_displs, "alltoallv");
  size_t send_total = static_cast<size_t>(s->displs.back()) + send_counts.back();
  size_t recv_total = static_cast<size_t>(s->recv_displs.back()) + recv_counts.back();
  const void* in = unaliased(*s, send, send_total * es, recv, recv_total * es);
  run_one(
      [=](MPI_Request* r) {
        MPI_Datatype t = mpi_type(type);
        return MPI_Ialltoallv(in, s->counts.data(), s->displs.data(), t, recv,
                              s->recv_counts.data(), s->recv_displs.data(), t, s->comm, r);
      },
      "MPI_Ialltoallv", wait);
}

void MpiComm::barrier(const MpiWait& wait) {
  MPI_Comm comm = state_->comm;
  run_one([=](MPI_Request* r) { return MPI_Ibarrier(comm, r); }, "MPI_Ibarrier", wait);
}

}  // namespace chorus::comm
