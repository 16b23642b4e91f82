// PsClient's state, shared by client.cc and client_state.cc: one PsConnection per ps and
// the layout once known. A call that involves every ps runs each ps's round trip on its
// own thread (the caller's for ps 0), so k ps are pulled or pushed in parallel and a step
// takes about the slowest ps's time, not the sum.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "chorus/ps/client.h"
#include "client_conn.h"

namespace chorus::ps {

struct PsClient::Impl {
  std::vector<std::unique_ptr<PsConnection>> ps;
  std::chrono::milliseconds timeout{0};
  ModelLayout layout;
  bool has_layout = false;
  bool broken = false;  // an UnavailableError was thrown: the client is unusable

  // Runs fn(conn) for every ps at once (or for ps `only` alone); rethrows the failure of
  // the lowest ps index.
  template <typename F>
  void each(F&& fn, int only = -1);
  void require_layout(const char* what) const;
  void check_arrays(size_t n, const char* what) const;
  bool collect_layouts();
  void assemble_layout();
};

template <typename F>
void PsClient::Impl::each(F&& fn, int only) {
  if (broken) {
    CHORUS_THROW(UnavailableError,
                 "a parameter server is unavailable: this PsClient lost one "
                 "earlier; restart from the last checkpoint with a new client");
  }
  std::vector<std::exception_ptr> errors(ps.size());
  auto run = [&](size_t i) {
    try {
      fn(*ps[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  if (only >= 0) {
    run(static_cast<size_t>(only));
  } else {
    for (size_t i = 1; i < ps.size(); ++i) threads.emplace_back(run, i);
    run(0);
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const UnavailableError&) {
      broken = true;
      throw;
    }
  }
}

}  // namespace chorus::ps
