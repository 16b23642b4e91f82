// Gloo as a peer: allreduce over Gloo's TCP transport, rendezvoused through a gloo
// FileStore in a directory shared by the ranks. Two algorithms:
//   ring_chunked  gloo::AllreduceRingChunked<T> (in place; built once per size), the
//                 default and the one in Gloo's own benchmarks;
//   allreduce     gloo::allreduce() with AllreduceOptions (ring), what PyTorch calls.
#include <cstdlib>
#include <map>
#include <string>

#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>

#include "backend.h"
#include "chorus/error.h"
#include "util/env.h"

namespace chorus::bench {
namespace {

int env_first(const char* a, const char* b, int fallback) {
  if (auto v = env_int(a)) return static_cast<int>(*v);
  if (auto v = env_int(b)) return static_cast<int>(*v);
  return fallback;
}

class GlooBackend : public Backend {
 public:
  GlooBackend(const std::string& store_dir, const std::string& iface, bool new_api)
      : new_api_(new_api) {
    rank_ = env_first("CHORUS_RANK", "OMPI_COMM_WORLD_RANK", 0);
    size_ = env_first("CHORUS_SIZE", "OMPI_COMM_WORLD_SIZE", 1);
    CHORUS_CHECK_ARG(!store_dir.empty(), "--peer gloo needs --gloo-store DIR (shared by ranks)");
    gloo::transport::tcp::attr attr;
    attr.iface = iface;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store("chorus-bench", file_store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    context->setTimeout(std::chrono::seconds(120));
    context->connectFullMesh(store, device);
    if (int sync = env_int_or("CHORUS_BENCH_GLOO_SYNC", 0)) {  // 1: blocking pairs, 2: busy polling
      for (int r = 0; r < size_; ++r) {
        if (r != rank_) context->getPair(r)->setSync(true, sync == 2);
      }
    }
    context_ = context;
    barrier_ = std::make_unique<gloo::BarrierAllToAll>(context_);
  }

  const char* name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool supports(Op op, DataType type) const override {
    return op == Op::kAllreduce && type == DataType::kFloat32;
  }

  // In place on recv (the sweep puts this rank's contribution there); send is unused.
  void run(Op, const void*, void* recv, size_t count, DataType) override {
    float* data = static_cast<float*>(recv);
    if (new_api_) {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      gloo::allreduce(opts);
      return;
    }
    auto key = std::make_pair(data, count);
    auto it = ring_.find(key);
    if (it == ring_.end()) {
      ring_.clear();  // one size at a time: free the previous size's buffers
      std::vector<float*> ptrs = {data};
      it = ring_
               .emplace(key, std::make_unique<gloo::AllreduceRingChunked<float>>(
                                 context_, ptrs, static_cast<int>(count)))
               .first;
    }
    it->second->run();
  }

  void barrier() override { barrier_->run(); }

  void max_across_ranks(std::vector<double>& values) override {
    std::vector<double*> ptrs = {values.data()};
    gloo::AllreduceRing<double> max(context_, ptrs, static_cast<int>(values.size()),
                                    gloo::ReductionFunction<double>::max);
    max.run();
  }

 private:
  bool new_api_;
  int rank_ = 0;
  int size_ = 1;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<gloo::BarrierAllToAll> barrier_;
  std::map<std::pair<float*, size_t>, std::unique_ptr<gloo::AllreduceRingChunked<float>>> ring_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const std::string& store_dir, const std::string& iface) {
  std::string algo = env_string("CHORUS_BENCH_GLOO_ALGO").value_or("ring_chunked");
  CHORUS_CHECK_ARG(algo == "ring_chunked" || algo == "allreduce",
                   "CHORUS_BENCH_GLOO_ALGO must be ring_chunked or allreduce, got ", algo);
  return std::make_unique<GlooBackend>(store_dir, iface, algo == "allreduce");
}

}  // namespace chorus::bench
