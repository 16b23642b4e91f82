// Handle: waiting on and reading the result of one enqueued op.
#include <thread>

#include "chorus/error.h"
#include "engine/handle_state.h"
#include "util/env.h"

namespace chorus {
namespace {

// Throws a copy of `error` that this thread alone owns. The original stays shared with
// the engine thread, which may drop the last reference to it: freeing an exception
// another thread read is ordered only by libstdc++'s refcount, which TSan cannot see.
[[noreturn]] void throw_copy(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const AuthError& e) {
    throw AuthError(std::string(e.what()));
  } catch (const UnavailableError& e) {
    throw UnavailableError(std::string(e.what()));
  } catch (const IoError& e) {
    throw IoError(std::string(e.what()));
  } catch (const TimeoutError& e) {
    throw TimeoutError(std::string(e.what()));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(e.what()));
  } catch (const Error& e) {
    throw Error(std::string(e.what()));
  }
}

}  // namespace

void HandleState::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    error = std::move(e);
  }
  cv.notify_all();
}

bool Handle::poll() const {
  CHORUS_CHECK_ARG(state_ != nullptr, "Handle::poll on an empty handle");
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->done) return true;
  }
  // A caller polling in a loop would otherwise keep its core from the engine thread,
  // which never preempts it (util/background_thread.h).
  std::this_thread::yield();
  return false;
}

void Handle::wait(std::chrono::milliseconds timeout) const {
  CHORUS_CHECK_ARG(state_ != nullptr, "Handle::wait on an empty handle");
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
    CHORUS_THROW(TimeoutError, "engine op not finished after ", timeout.count(), " ms");
  }
  if (state_->error) throw_copy(state_->error);
}

void Handle::wait() const { wait(default_timeout()); }

bool Handle::wait_for(std::chrono::milliseconds timeout) const {
  CHORUS_CHECK_ARG(state_ != nullptr, "Handle::wait_for on an empty handle");
  std::unique_lock<std::mutex> lock(state_->mu);
  return state_->cv.wait_for(lock, timeout, [&] { return state_->done; });
}

const HandleState& Handle::done_state() const {
  CHORUS_CHECK_ARG(state_ != nullptr, "result of an empty handle");
  std::lock_guard<std::mutex> lock(state_->mu);
  CHORUS_CHECK_ARG(state_->done && !state_->error,
                   "result of an engine op that has not finished successfully");
  return *state_;
}

const void* Handle::data() const { return done_state().data; }
size_t Handle::bytes() const { return done_state().bytes; }
const std::vector<int64_t>& Handle::shape() const { return done_state().shape; }
const std::vector<int64_t>& Handle::received_splits() const { return done_state().received_splits; }
int Handle::last_joined_rank() const { return static_cast<int>(done_state().value); }
const SharedBuffer& Handle::shared_buffer() const { return done_state().shared_buffer; }

}  // namespace chorus
