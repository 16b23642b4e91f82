#include "comm/mpi_service.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "chorus/error.h"

namespace chorus::mpi {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  CHORUS_THROW(IoError, "MPI: ", what, " failed: ", std::string(text, length));
}

namespace {

// One call handed to the MPI thread: either `run` (blocking) or `start` (nonblocking).
struct Task {
  std::function<void()> run;
  std::function<std::vector<MPI_Request>()> start;
  std::vector<MPI_Request> requests;  // the thread's only
  bool started = false;               // the thread's only
  bool done = false;                  // under Service::Impl::mu
  std::exception_ptr error;           // set before done
};

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

}  // namespace

struct Service::Impl {
  std::mutex mu;
  std::condition_variable wake;      // the thread: a task was queued, or exit began
  std::condition_variable finished;  // callers: a task is done
  std::deque<std::shared_ptr<Task>> queue;
  bool stopping = false;
  int abandoned = 0;      // calls whose caller timed out: MPI may be stuck in them
  int holders = 0;        // Service::hold() - release()
  bool finalize = false;  // at exit: everything was released, so MPI_Finalize
  bool owns_mpi = false;  // chorus initialised MPI, so it finalizes it
  std::thread thread;
  pid_t owner = 0;  // the process whose exit stops the thread (not a fork of it)

  void start_mpi();
  void loop();
  // Moves `task` on; true when it is done (also when it failed).
  static bool advance(Task& task);
  void submit(const std::shared_ptr<Task>& task, Deadline deadline, const Describe& describe);
};

void Service::Impl::start_mpi() {
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  CHORUS_CHECK_ARG(!finalized,
                   "MPI was finalized in this process already: chorus cannot use MPI again (MPI "
                   "cannot be initialised twice)");
  MPI_Initialized(&initialized);
  if (initialized) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    CHORUS_CHECK_ARG(provided == MPI_THREAD_MULTIPLE, "MPI was initialised by the program with ",
                     thread_level_name(provided),
                     "; chorus calls MPI from a thread of its own, which needs "
                     "MPI_THREAD_MULTIPLE (call MPI_Init_thread with MPI_THREAD_MULTIPLE, or "
                     "leave initialising MPI to chorus)");
    return;
  }
  int provided = MPI_THREAD_SINGLE;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  owns_mpi = true;
  CHORUS_CHECK_ARG(provided >= MPI_THREAD_FUNNELED, "this MPI provides only ",
                   thread_level_name(provided),
                   "; chorus calls MPI from a thread of its own, which needs "
                   "MPI_THREAD_FUNNELED");
}

bool Service::Impl::advance(Task& task) {
  try {
    if (task.run) {
      task.run();
      return true;
    }
    if (!task.started) {
      task.requests = task.start();
      task.started = true;
    }
    if (task.requests.empty()) return true;
    int flag = 0;
    check(MPI_Testall(static_cast<int>(task.requests.size()), task.requests.data(), &flag,
                      MPI_STATUSES_IGNORE),
          "a collective");
    return flag != 0;
  } catch (...) {
    task.error = std::current_exception();
    return true;
  }
}

void Service::Impl::loop() {
  std::vector<std::shared_ptr<Task>> active;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      if (active.empty()) wake.wait(lock, [&] { return stopping || !queue.empty(); });
      for (; !queue.empty(); queue.pop_front()) active.push_back(std::move(queue.front()));
      if (stopping) break;
    }
    bool moved = false;
    for (size_t i = 0; i < active.size();) {
      if (!advance(*active[i])) {
        ++i;
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        active[i]->done = true;
      }
      finished.notify_all();
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      moved = true;
    }
    // Polling, as MPI's own blocking calls do; yielding lets the ranks' other threads run.
    if (!moved && !active.empty()) std::this_thread::yield();
  }
  // Finalizing with operations outstanding would block on peers that are gone: a job with
  // a timed-out call ends without it (mpirun then reports the job as failed, as it was).
  if (owns_mpi && finalize && active.empty()) MPI_Finalize();
}

void Service::Impl::submit(const std::shared_ptr<Task>& task, Deadline deadline,
                           const Describe& describe) {
  std::unique_lock<std::mutex> lock(mu);
  if (stopping) CHORUS_THROW(IoError, describe(), ": MPI is shut down (the process is exiting)");
  queue.push_back(task);
  wake.notify_one();
  auto done = [&] { return task->done; };
  if (deadline.at() == Clock::time_point::max()) {
    finished.wait(lock, done);
  } else if (!finished.wait_until(lock, deadline.at(), done)) {
    ++abandoned;
    CHORUS_THROW(TimeoutError, describe(), ": MPI did not complete it in time");
  }
  lock.unlock();
  if (task->error) std::rethrow_exception(task->error);
}

namespace {

Service* the_service = nullptr;
Service::Impl* the_impl = nullptr;

// At exit: stop the thread, which finalizes MPI if chorus initialised it and nothing holds
// it. Not in a fork of the process (the thread is not there); without waiting when MPI is
// not finalized (the thread may be stuck in a call whose caller gave up).
void stop_at_exit() {
  Service::Impl* impl = the_impl;
  if (impl == nullptr || impl->owner != ::getpid()) return;
  bool clean = false;
  {
    std::lock_guard<std::mutex> lock(impl->mu);
    impl->stopping = true;
    clean = impl->finalize = impl->abandoned == 0 && impl->holders == 0;
  }
  impl->wake.notify_one();
  if (clean) impl->thread.join();  // through MPI_Finalize, which waits for every rank
}

}  // namespace

Service& Service::get() {
  static std::mutex mu;
  static std::exception_ptr failure;
  std::lock_guard<std::mutex> lock(mu);
  if (the_service) return *the_service;
  if (failure) std::rethrow_exception(failure);
  auto* impl = new Impl;  // lives until the process ends: its thread may outlive any owner
  impl->owner = ::getpid();
  std::promise<void> ready;
  impl->thread = std::thread([impl, &ready] {
    try {
      impl->start_mpi();
    } catch (...) {
      ready.set_exception(std::current_exception());
      return;
    }
    ready.set_value();
    impl->loop();
  });
  try {
    ready.get_future().get();
  } catch (...) {
    failure = std::current_exception();
    impl->thread.join();
    delete impl;
    throw;
  }
  the_service = new Service;
  the_service->impl_ = impl;
  the_impl = impl;
  std::atexit(stop_at_exit);
  return *the_service;
}

void Service::call(const std::function<void()>& fn, Deadline deadline, const Describe& describe) {
  auto task = std::make_shared<Task>();
  task->run = fn;
  impl_->submit(task, deadline, describe);
}

void Service::wait_for(const std::function<std::vector<MPI_Request>()>& start, Deadline deadline,
                       const Describe& describe) {
  auto task = std::make_shared<Task>();
  task->start = start;
  impl_->submit(task, deadline, describe);
}

void Service::hold() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ++impl_->holders;
}

void Service::release() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  --impl_->holders;
}

bool Service::running() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return !impl_->stopping;
}

}  // namespace chorus::mpi
