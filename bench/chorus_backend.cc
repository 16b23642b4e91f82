// chorus itself: the world communicator of the job (chorus::Job, read from the
// environment of whichever launcher started this process).
//
// Under chorusrun the launcher serves the store. Started by hand, give every rank
// CHORUS_RANK, CHORUS_SIZE, CHORUS_SECRET and either MASTER_ADDR + MASTER_PORT (rank 0
// serves the store there) or CHORUS_STORE_ADDR (a store someone else serves).
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "chorus/communicator.h"
#include "chorus/job.h"

namespace chorus::bench {
namespace {

class ChorusBackend : public Backend {
 public:
  explicit ChorusBackend(const ChorusBackendOptions& options)
      : shared_buffers_(options.shared_buffers) {
    CommunicatorOptions comm_options = CommunicatorOptions::from_env();
    if (!options.algorithm.empty()) {
      comm_options.allreduce_algorithm = parse_allreduce_algorithm(options.algorithm);
    }
    job_ = Job::from_env(comm_options);
    comm_ = &job_->world();
  }

  ~ChorusBackend() override {
    // Everyone is done before rank 0 (which may serve the store) goes away.
    if (!comm_->broken()) comm_->barrier();
  }

  const char* name() const override { return "chorus"; }
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  bool supports(Op, DataType) const override { return true; }

  void run(Op op, const void* send, void* recv, size_t count, DataType type) override {
    const int n = comm_->size();
    switch (op) {
      case Op::kAllreduce:
        return comm_->allreduce(send, recv, count, type, ReduceOp::kSum);
      case Op::kAllgather:
        return comm_->allgather(send, recv, count, type);
      case Op::kBroadcast:
        return comm_->broadcast(recv, count, type, 0);
      case Op::kReduceScatter:
        return comm_->reduce_scatter(send, recv, std::vector<size_t>(n, count), type,
                                     ReduceOp::kSum);
      case Op::kAlltoall:
        return comm_->alltoall(send, recv, count, type);
    }
  }

  void barrier() override { comm_->barrier(); }

  std::shared_ptr<void> allocate(size_t bytes) override {
    if (!shared_buffers_ || bytes == 0) return nullptr;
    auto buffer = std::make_shared<SharedBuffer>(comm_->alloc_shared(bytes));
    return std::shared_ptr<void>(buffer, buffer->data());
  }

  void max_across_ranks(std::vector<double>& values) override {
    comm_->allreduce(values.data(), values.data(), values.size(), DataType::kFloat64,
                     ReduceOp::kMax);
  }

 private:
  std::unique_ptr<Job> job_;
  Communicator* comm_ = nullptr;
  bool shared_buffers_;
};

}  // namespace

std::unique_ptr<Backend> make_chorus_backend(const ChorusBackendOptions& options) {
  return std::make_unique<ChorusBackend>(options);
}

}  // namespace chorus::bench
