// engine_bench: many small allreduces through the engine (fused and unfused) against one
// flat Communicator allreduce of the same bytes. The tensor set is ResNet-50-like: 161
// float32 tensors, sizes log-uniform from 1 KB to 4 MB, about 100 MB in total. Both sides
// average in place, as DistributedOptimizer does with gradients.
//
//   chorusrun -np 2 -- engine_bench [--steps 20] [--warmup 3] [--rounds 3]
//                                   [--modes flat,fused,off,parts]
//
// "parts" (not run by default) times Communicator::allreduce over the 161 tensors as parts,
// without the engine: the collective the engine's groups use under single copy.
//
// Modes are interleaved round by round (flat, fused, unfused, ...) so that a noisy machine
// affects them alike; each reports the median step time over all its timed steps.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "chorus/engine.h"
#include "chorus/error.h"
#include "chorus/job.h"

namespace {

using chorus::DataType;
using Clock = std::chrono::steady_clock;

struct Args {
  int steps = 20, warmup = 3, rounds = 3, tensors = 161;
  std::string modes = "flat,fused,off";
  double min_bytes = 1024, max_bytes = 4 << 20, target_mb = 100;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--modes") {
      a.modes = argv[i + 1];
      continue;
    }
    if (k == "--steps")
      a.steps = v;
    else if (k == "--warmup")
      a.warmup = v;
    else if (k == "--rounds")
      a.rounds = v;
    else if (k == "--tensors")
      a.tensors = v;
    else
      CHORUS_THROW(chorus::InvalidArgument, "unknown option ", k);
  }
  return a;
}

// Log-uniform sizes (float32 elements); the first seed whose total is within 5% of the
// target, so every run and every rank uses the same set.
std::vector<size_t> tensor_sizes(const Args& a) {
  for (unsigned seed = 1;; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(std::log(a.min_bytes), std::log(a.max_bytes));
    std::vector<size_t> sizes;
    double total = 0;
    for (int i = 0; i < a.tensors; ++i) {
      sizes.push_back(static_cast<size_t>(std::exp(u(rng)) / 4));
      total += sizes.back() * 4.0;
    }
    if (std::abs(total / 1e6 - a.target_mb) < a.target_mb * 0.05) return sizes;
  }
}

// Floats in memory not touched until filled (std::vector would write them at once).
struct Buffer {
  explicit Buffer(size_t n) : p(new float[n]), n(n) {}
  float* data() { return p.get(); }
  const float* data() const { return p.get(); }
  size_t size() const { return n; }
  float& operator[](size_t i) { return p[i]; }
  const float& operator[](size_t i) const { return p[i]; }
  std::unique_ptr<float[]> p;
  size_t n;
};
using Tensors = std::vector<Buffer>;

// Writes the tensors and the flat buffer 64 KiB at a time in turn, so both get their
// memory pages in the same stretch: allocated one after the other, whichever came second
// ran up to 10% faster here (physical placement), which would bias the comparison.
void fill_alternately(Buffer& flat, float flat_value, Tensors& tensors, float value) {
  constexpr size_t kStep = (64 << 10) / sizeof(float);
  size_t off = 0;
  for (Buffer& t : tensors) {
    for (size_t i = 0; i < t.size(); i += kStep) {
      size_t n = std::min(kStep, t.size() - i);
      std::fill_n(t.data() + i, n, value);
      std::fill_n(flat.data() + off + i, n, flat_value);
    }
    off += t.size();
  }
}

double engine_step(chorus::Engine& e, Tensors& t, const std::vector<size_t>& sizes) {
  auto t0 = Clock::now();
  std::vector<chorus::Handle> hs;
  hs.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    hs.push_back(e.allreduce("layer" + std::to_string(i), t[i].data(), t[i].data(),
                             DataType::kFloat32, {static_cast<int64_t>(sizes[i])},
                             chorus::ReduceOp::kAverage));
  }
  for (auto& h : hs) h.wait();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double flat_step(chorus::Communicator& c, Buffer& flat) {
  auto t0 = Clock::now();
  c.allreduce(flat.data(), flat.data(), flat.size(), DataType::kFloat32,
              chorus::ReduceOp::kAverage);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double parts_step(chorus::Communicator& c, Tensors& t) {
  std::vector<chorus::BufferPart> parts;
  for (auto& v : t) parts.push_back({v.data(), v.data(), v.size()});
  auto t0 = Clock::now();
  c.allreduce(parts, DataType::kFloat32, chorus::ReduceOp::kAverage);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One round of an engine mode: start, warm up (fills the response cache), time, shut down.
void engine_round(chorus::Communicator& comm, size_t threshold, const Args& a, Tensors& b,
                  const std::vector<size_t>& sizes, std::vector<double>& times) {
  auto opts = chorus::EngineOptions::from_env();
  opts.fusion_threshold = threshold;
  auto engine = chorus::Engine::start(comm, opts);
  for (int i = 0; i < a.warmup; ++i) engine_step(*engine, b, sizes);
  for (int i = 0; i < a.steps; ++i) times.push_back(engine_step(*engine, b, sizes));
  engine->shutdown();
}

// Every rank starts with rank + 1 everywhere; averaging in place keeps the mean there.
void check_average(const Tensors& tensors, int size) {
  float want = 0;
  for (int r = 0; r < size; ++r) want += static_cast<float>(r + 1);
  want /= static_cast<float>(size);
  for (const auto& v : tensors) {
    if (v.size() == 0 || v[0] != want || v[v.size() - 1] != want) {
      CHORUS_THROW(chorus::Error, "engine_bench: wrong average ", v.size() ? v[0] : 0.f);
    }
  }
}

}  // namespace

int main(int argc, char** argv) try {
  Args a = parse(argc, argv);
  auto job = chorus::Job::from_env();
  auto& comm = job->world();
  auto sizes = tensor_sizes(a);
  size_t total = 0;
  for (size_t n : sizes) total += n;
  Buffer flat(total);
  Tensors b(sizes.begin(), sizes.end());
  fill_alternately(flat, 1.f, b, static_cast<float>(comm.rank() + 1));
  std::vector<double> t_flat, t_fused, t_unfused, t_parts;
  const size_t fused_threshold = chorus::EngineOptions::from_env().fusion_threshold;
  for (int round = 0; round < a.rounds; ++round) {
    if (a.modes.find("flat") != std::string::npos) {
      for (int i = 0; i < a.warmup; ++i) flat_step(comm, flat);
      for (int i = 0; i < a.steps; ++i) t_flat.push_back(flat_step(comm, flat));
    }
    if (a.modes.find("fused") != std::string::npos) {
      engine_round(comm, fused_threshold, a, b, sizes, t_fused);
      check_average(b, comm.size());
    }
    if (a.modes.find("off") != std::string::npos) {
      engine_round(comm, 0, a, b, sizes, t_unfused);
      check_average(b, comm.size());
    }
    if (a.modes.find("parts") != std::string::npos) {
      for (int i = 0; i < a.warmup; ++i) parts_step(comm, b);
      for (int i = 0; i < a.steps; ++i) t_parts.push_back(parts_step(comm, b));
      check_average(b, comm.size());
    }
  }
  if (comm.rank() == 0) {
    double f = median(t_flat), fu = median(t_fused), un = median(t_unfused);
    std::printf(
        "engine_bench: %zu float32 tensors, %.1f MB, %d ranks, transport %s, "
        "%d rounds x %d steps (medians)\n",
        sizes.size(), total * 4 / 1e6, comm.size(), comm.options().transport.c_str(), a.rounds,
        a.steps);
    std::printf("  flat allreduce        %8.2f ms\n", f * 1e3);
    std::printf("  engine fused (%zu MiB) %8.2f ms  %.3fx flat\n", fused_threshold >> 20, fu * 1e3,
                fu / f);
    std::printf("  engine fusion off     %8.2f ms  %.3fx flat\n", un * 1e3, un / f);
    if (!t_parts.empty()) {
      double pa = median(t_parts);
      std::printf("  parts, no engine      %8.2f ms  %.3fx flat\n", pa * 1e3, pa / f);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "engine_bench: %s\n", e.what());
  return 1;
}
