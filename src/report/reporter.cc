// The reporting thread of include/chorus/report.h. One per process, started by the first
// call when CHORUS_REPORT_SECONDS asks for reports; it connects to the store itself, so the
// training thread never waits for the network. Lock order: sources_mu, then mu (the
// thread takes the source list first so that removing a source waits for a report).
#include "chorus/report.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "chorus/engine.h"
#include "chorus/store.h"
#include "report/report_format.h"
#include "util/env.h"
#include "util/log.h"
#include "util/net.h"

namespace chorus::report {
namespace {

constexpr size_t kMaxScalars = 16;

struct Totals {
  int64_t steps = 0;
  int64_t samples = 0;
  double compute = 0, wait = 0, data = 0;
  double bytes = 0;
  double tensors = 0;
  std::vector<std::pair<std::string, double>> scalars;
};

int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  long long pages = 0, resident = 0;
  if (!(f >> pages >> resident)) return 0;
  return resident * ::sysconf(_SC_PAGESIZE);
}

std::string host_name() {
  if (auto id = env_string("CHORUS_HOST_ID")) return clean_name(*id);
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return clean_name(buf);
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

class Reporter {
 public:
  Reporter(double period_s, std::string store_addr)
      : period_(std::chrono::duration<double>(period_s)), store_addr_(std::move(store_addr)) {
    rank_ = static_cast<int>(env_int_or("CHORUS_RANK", 0));
    restart_ = static_cast<int>(env_int_or("CHORUS_RESTART_COUNT", 0));
    host_ = host_name();
    thread_ = std::thread([this] { run(); });
  }
  ~Reporter() { stop(); }

  void step(const Step& s) {
    std::lock_guard<std::mutex> lock(mu_);
    ++totals_.steps;
    totals_.samples += s.samples;
    totals_.compute += s.compute_seconds;
    totals_.wait += s.wait_seconds;
    totals_.data += s.data_seconds;
    totals_.bytes += static_cast<double>(s.collective_bytes);
    totals_.tensors += static_cast<double>(s.collective_tensors);
  }

  void scalar(const std::string& name, double value) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [n, v] : totals_.scalars) {
      if (n == name) {
        v = value;
        return;
      }
    }
    if (totals_.scalars.size() < kMaxScalars) totals_.scalars.emplace_back(clean_name(name), value);
  }

  std::unique_ptr<SourceToken> add(CounterSource source) {
    std::lock_guard<std::mutex> lock(sources_mu_);
    int id = next_id_++;
    sources_[id] = std::move(source);
    return std::make_unique<SourceToken>(id);
  }
  void remove(int id) {
    std::lock_guard<std::mutex> lock(sources_mu_);
    sources_.erase(id);
  }

  std::string text() {
    std::string out;
    {
      std::lock_guard<std::mutex> lock(sources_mu_);
      for (auto& [id, source] : sources_) {
        for (const auto& [name, value] : source()) {
          std::string n = clean_name(name);
          if (!n.empty()) out += "counter." + n + " " + number(value) + "\n";
        }
      }
    }
    Totals t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      t = totals_;
    }
    double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string head = "host " + host_ + "\nrank " + std::to_string(rank_) + "\nrestart " +
                       std::to_string(restart_) + "\npid " + std::to_string(::getpid()) +
                       "\ntime " + number(now) + "\nsteps " + std::to_string(t.steps) +
                       "\nsamples " + std::to_string(t.samples) + "\ncompute_s " +
                       number(t.compute) + "\nwait_s " + number(t.wait) + "\ndata_s " +
                       number(t.data) + "\nbytes " + number(t.bytes) + "\ntensors " +
                       number(t.tensors) + "\nrss_bytes " + std::to_string(rss_bytes()) + "\n";
    for (const auto& [name, value] : t.scalars) {
      if (!name.empty()) head += "scalar." + name + " " + number(value) + "\n";
    }
    return (head + out).substr(0, kMaxReportBytes);
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(wake_mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void send(std::unique_ptr<Store>& store) {
    try {
      if (!store) {
        net::Endpoint at = net::Endpoint::parse(store_addr_);
        std::optional<Secret> secret = Secret::from_env();
        if (!secret) return;
        store =
            std::make_unique<TcpStoreClient>(at.host, at.port, *secret, std::chrono::seconds(5));
      }
      store->set(report_key(restart_, rank_), text());
    } catch (const std::exception& e) {
      // The launcher may be gone or busy: try again next period with a fresh connection.
      if (!warned_) CHORUS_LOG(kInfo, "report") << "report not sent: " << e.what();
      warned_ = true;
      store.reset();
    }
  }

  void run() {
    std::unique_ptr<Store> store;
    std::unique_lock<std::mutex> lock(wake_mu_);
    while (!stopped_) {
      lock.unlock();
      send(store);
      lock.lock();
      wake_.wait_for(lock, period_, [this] { return stopped_; });
    }
    lock.unlock();
    send(store);  // the last totals
  }

  const std::chrono::duration<double> period_;
  const std::string store_addr_;
  int rank_ = 0, restart_ = 0;
  std::string host_;
  std::mutex mu_;  // guards totals_
  Totals totals_;
  std::mutex sources_mu_;  // guards sources_, next_id_
  std::map<int, CounterSource> sources_;
  int next_id_ = 0;
  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stopped_ = false;
  bool warned_ = false;  // reporting thread only
  std::thread thread_;
};

std::mutex g_mu;
std::atomic<int> g_state{0};     // 0: not decided, 1: off, 2: on
Reporter* g_reporter = nullptr;  // leaked on purpose at exit: stopped by atexit

void stop_at_exit() { flush_and_stop(); }

Reporter* reporter() {
  int state = g_state.load(std::memory_order_acquire);
  if (state == 1) return nullptr;
  if (state == 2) return g_reporter;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_state.load() != 0) return g_state.load() == 2 ? g_reporter : nullptr;
  double period = env_double_or("CHORUS_REPORT_SECONDS", 0);
  auto addr = env_string("CHORUS_STORE_ADDR");
  if (period > 0 && addr && !addr->empty()) {
    g_reporter = new Reporter(std::max(period, 0.1), *addr);
    std::atexit(stop_at_exit);
    g_state.store(2, std::memory_order_release);
  } else {
    g_state.store(1, std::memory_order_release);
  }
  return g_reporter;
}

}  // namespace

SourceToken::~SourceToken() {
  if (Reporter* r = reporter()) r->remove(id_);
}

bool enabled() { return reporter() != nullptr; }

void step(const Step& s) {
  if (Reporter* r = reporter()) r->step(s);
}

void scalar(const std::string& name, double value) {
  if (Reporter* r = reporter()) r->scalar(name, value);
}

std::unique_ptr<SourceToken> add_counters(CounterSource source) {
  Reporter* r = reporter();
  return r ? r->add(std::move(source)) : nullptr;
}

std::unique_ptr<SourceToken> watch_engine(const Engine& engine) {
  return add_counters([&engine]() -> std::vector<std::pair<std::string, double>> {
    EngineStats s = engine.stats();
    return {{"engine_cycles", static_cast<double>(s.cycles)},
            {"engine_full_negotiations", static_cast<double>(s.full_negotiations)},
            {"engine_cache_hits", static_cast<double>(s.cache_hits)},
            {"engine_collectives", static_cast<double>(s.collectives)},
            {"engine_fused_tensors", static_cast<double>(s.fused_tensors)},
            {"engine_stall_warnings", static_cast<double>(s.stall_warnings)},
            {"engine_ops", static_cast<double>(s.ops)},
            {"engine_op_bytes", static_cast<double>(s.op_bytes)}};
  });
}

std::string current_report() {
  Reporter* r = reporter();
  return r ? r->text() : std::string();
}

void flush_and_stop() {
  if (Reporter* r = reporter()) r->stop();
}

}  // namespace chorus::report
