// Transformations with threads: map (a worker pool for num_parallel_calls > 1) and
// prefetch (one producer thread and a bounded queue) (src/train/data/stages.h).
//
// Both transport errors to the consumer in element order: the elements produced before a
// failure are delivered first, then next() rethrows. Both stop and join their threads in
// the destructor; a thread blocked on a full queue is woken by the stop flag, a user
// function already running is waited for.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include "chorus/error.h"
#include "stages.h"

namespace chorus {
namespace data_detail {
namespace {

constexpr int64_t kAutotunePrefetch = 2;

// ---- map ----

class MapIter final : public Iter {
 public:
  MapIter(std::unique_ptr<Iter> in, std::function<Example(Example)> fn)
      : in_(std::move(in)), fn_(std::move(fn)) {}

  std::optional<Example> next() override {
    std::optional<Example> e = in_->next();
    if (!e) return std::nullopt;
    return fn_(std::move(*e));
  }

 private:
  std::unique_ptr<Iter> in_;
  std::function<Example(Example)> fn_;
};

// Threads running queued tasks. The destructor drops the tasks not started (their futures
// report broken_promise, but nobody waits on them any more) and joins.
class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }

  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      tasks_.clear();
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void submit(std::packaged_task<Example()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    while (true) {
      std::packaged_task<Example()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (stop_) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();  // exceptions land in the task's future
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Example()>> tasks_;  // guarded by mu_
  bool stop_ = false;                                // guarded by mu_
  std::vector<std::thread> threads_;
};

// Keeps up to `parallel` calls in flight; the consumer reads the input (iterators are
// single-threaded) and takes results in input order.
class ParallelMapIter final : public Iter {
 public:
  ParallelMapIter(std::unique_ptr<Iter> in, std::function<Example(Example)> fn, int parallel)
      : in_(std::move(in)), fn_(std::move(fn)), parallel_(parallel), pool_(parallel) {}

  std::optional<Example> next() override {
    refill();
    if (pending_.empty()) {
      if (!input_error_) return std::nullopt;
      std::exception_ptr error = std::exchange(input_error_, nullptr);
      std::rethrow_exception(error);
    }
    std::future<Example> f = std::move(pending_.front());
    pending_.pop_front();
    return f.get();
  }

 private:
  void refill() {
    while (!input_done_ && static_cast<int>(pending_.size()) < parallel_) {
      std::optional<Example> e;
      try {
        e = in_->next();
      } catch (...) {
        input_error_ = std::current_exception();  // after the calls already started
      }
      if (!e) {
        input_done_ = true;
        return;
      }
      const auto* fn = &fn_;  // outlives the pool: declared before it
      std::packaged_task<Example()> task(
          [fn, x = std::move(*e)]() mutable { return (*fn)(std::move(x)); });
      pending_.push_back(task.get_future());
      pool_.submit(std::move(task));
    }
  }

  std::unique_ptr<Iter> in_;
  std::function<Example(Example)> fn_;
  int parallel_;
  std::deque<std::future<Example>> pending_;
  bool input_done_ = false;
  std::exception_ptr input_error_;
  WorkerPool pool_;  // last: joined before the members its tasks use are destroyed
};

// ---- prefetch ----

class PrefetchIter final : public Iter {
 public:
  PrefetchIter(std::unique_ptr<Iter> in, size_t capacity)
      : in_(std::move(in)), capacity_(capacity) {
    thread_ = std::thread([this] { produce(); });
  }

  ~PrefetchIter() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    not_full_.notify_all();
    thread_.join();
  }

  std::optional<Example> next() override {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [this] { return !queue_.empty() || finished_; });
    if (!queue_.empty()) {
      Example e = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      not_full_.notify_one();
      return e;
    }
    if (!error_) return std::nullopt;
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }

 private:
  void produce() {
    try {
      while (wait_for_room()) {
        std::optional<Example> e = in_->next();
        std::lock_guard<std::mutex> lock(mu_);
        if (!e) {
          finished_ = true;
          break;
        }
        queue_.push_back(std::move(*e));
        not_empty_.notify_one();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      finished_ = true;
    }
    not_empty_.notify_all();
  }

  // False when the iterator is being destroyed.
  bool wait_for_room() {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [this] { return stop_ || queue_.size() < capacity_; });
    return !stop_;
  }

  std::unique_ptr<Iter> in_;  // used by the producer thread only
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Example> queue_;  // guarded by mu_
  bool finished_ = false;      // guarded by mu_: the producer has exited
  bool stop_ = false;          // guarded by mu_
  std::exception_ptr error_;   // guarded by mu_
  std::thread thread_;
};

}  // namespace

MapStage::MapStage(Ptr in, std::function<Example(Example)> f, int p)
    : StageImpl(std::move(in)), fn(std::move(f)), parallel(p) {
  CHORUS_CHECK_ARG(fn, "map: no function");
  CHORUS_CHECK_ARG(parallel >= 1 || parallel == kAutotune,
                   "map: num_parallel_calls must be positive or kAutotune, got ", parallel);
  if (parallel == kAutotune) {
    parallel = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
}

std::unique_ptr<Iter> MapStage::make(const Context& ctx) const {
  if (parallel == 1) return std::make_unique<MapIter>(make_input(ctx), fn);
  return std::make_unique<ParallelMapIter>(make_input(ctx), fn, parallel);
}

std::string MapStage::describe() const {
  return parallel == 1 ? "map" : "map(parallel " + std::to_string(parallel) + ")";
}

PrefetchStage::PrefetchStage(Ptr in, int64_t b) : StageImpl(std::move(in)), buffer(b) {
  CHORUS_CHECK_ARG(buffer > 0 || buffer == kAutotune,
                   "prefetch: buffer_size must be positive or kAutotune, got ", buffer);
  if (buffer == kAutotune) buffer = kAutotunePrefetch;
}

std::unique_ptr<Iter> PrefetchStage::make(const Context& ctx) const {
  return std::make_unique<PrefetchIter>(make_input(ctx), static_cast<size_t>(buffer));
}

std::string PrefetchStage::describe() const { return "prefetch(" + std::to_string(buffer) + ")"; }

}  // namespace data_detail
}  // namespace chorus
