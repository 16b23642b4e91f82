#include "elastic.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "rendezvous/elastic_rounds.h"
#include "util/net.h"

namespace chorus::run {
namespace er = elastic_rounds;

namespace {

constexpr int kBlacklistAfter = 3;  // failures of a host within the cooldown
constexpr auto kDiscoveryTimeout = std::chrono::seconds(10);

// What a worker must not inherit from a launcher that itself ran under one.
const std::vector<std::string> kPlaceVars = {
    "CHORUS_RANK",         "CHORUS_SIZE",        "CHORUS_LOCAL_RANK",  "CHORUS_LOCAL_SIZE",
    "CHORUS_CROSS_RANK",   "CHORUS_CROSS_SIZE",  "HOROVOD_RANK",       "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",  "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
    "CHORUS_RESTART_COUNT"};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Reads the child's stdout to its end within `timeout`; kills it on overrun.
std::string read_all(Child& c, std::chrono::milliseconds timeout, const std::string& script) {
  std::string out;
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(-c.pid, SIGKILL);
      ::waitpid(c.pid, nullptr, 0);
      throw UsageError("host discovery script '" + script + "' took longer than " +
                       std::to_string(timeout.count() / 1000) + " s");
    }
    pollfd p{c.out_fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100))) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(c.out_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) {
      ::kill(-c.pid, SIGKILL);
      ::waitpid(c.pid, nullptr, 0);
      throw UsageError("host discovery script '" + script + "' printed more than 1 MiB");
    }
  }
  return out;
}

}  // namespace

std::vector<HostSlots> discover_hosts(const std::string& script,
                                      std::chrono::milliseconds timeout) {
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = inherited_env({});
  Child c = spawn(spec);
  ::close(c.err_fd);  // its complaints go nowhere; the exit status tells
  std::string out;
  try {
    out = read_all(c, timeout, script);
  } catch (...) {
    ::close(c.out_fd);
    throw;
  }
  ::close(c.out_fd);
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw UsageError("host discovery script '" + script + "' ended with " +
                     describe_status(status, false));
  }
  std::string list;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    std::string line = trim(out.substr(start, end - start));
    start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    list += (list.empty() ? "" : ",") + line;
  }
  if (list.empty()) return {};
  return parse_host_list(list);
}

ElasticJob::ElasticJob(const JobPlan& plan, Store& store)
    : plan_(plan), store_(store), hosts_(plan.hosts) {
  next_discovery_ =
      Clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(plan.options.discovery_interval * 1000));
}

void ElasticJob::install(SuperviseOptions& so) {
  so.decide = [this](const Child& c, const std::string& what) { return on_exit(c, what); };
  so.tick = [this](std::vector<std::unique_ptr<LineRelay>>& relays) { return tick(relays); };
}

std::vector<Child> ElasticJob::start(std::vector<std::unique_ptr<LineRelay>>& relays) {
  std::vector<Child> children;
  for (const Placement& p : plan_.placements) children.push_back(start_worker(p.host, relays));
  publish("start");
  return children;
}

Child ElasticJob::start_worker(const std::string& host,
                               std::vector<std::unique_ptr<LineRelay>>& relays) {
  const std::string id = "w" + std::to_string(next_id_++);
  Placement p;
  p.host = host;
  p.local = is_local_host(host);
  const Options& o = plan_.options;
  EnvVars own = {
      {"CHORUS_ELASTIC_ID", id},
      {"CHORUS_STORE_ADDR", net::Endpoint{plan_.store_host, plan_.store_port}.to_string()},
      {"CHORUS_HOST_ID", host},
      // What Horovod's elastic driver tells its workers: the host, and the rank the worker
      // starts with (its place in the next round: newcomers come after everyone).
      {"HOROVOD_HOSTNAME", host},
      {"HOROVOD_RANK", std::to_string(live_.size())},
      // Workers wait for a round a little longer than the launcher waits for slots.
      {"CHORUS_ELASTIC_TIMEOUT_SECONDS",
       std::to_string(static_cast<int64_t>(o.elastic_timeout) + 30)},
  };
  SpawnSpec spec = process_spec(plan_, p, own, kPlaceVars);
  add_relays(plan_, id, "worker." + id, relays);
  Child c = spawn(spec);
  c.label = id;
  c.host = host;
  c.remote = !p.local;
  live_.push_back({id, host, c.pid});
  if (o.verbose)
    say("started worker " + id + " on " + host + " (pid " + std::to_string(c.pid) + ")");
  return c;
}

ExitDecision ElasticJob::on_exit(const Child& child, const std::string& what) {
  auto it = std::find_if(live_.begin(), live_.end(),
                         [&](const Worker& w) { return w.id == child.label; });
  if (it == live_.end()) return {};
  live_.erase(it);
  if (WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0) {
    finishing_ = true;
    return {};
  }
  failures_[child.host].push_back(Clock::now());
  // Also while finishing: the others may still need a world to end their last steps in.
  if (static_cast<int>(live_.size()) >= plan_.options.min_np) publish(child.label + " failed");
  return {ExitDecision::Action::kContinue,
          what + "; the job goes on with " + std::to_string(live_.size()) + " workers"};
}

TickResult ElasticJob::tick(std::vector<std::unique_ptr<LineRelay>>& relays) {
  TickResult t;
  if (round_ >= 0 && store_.check({er::request_key(round_)})) {
    publish("a worker asked for a new round");
  }
  if (!plan_.options.discovery_script.empty() && Clock::now() >= next_discovery_) discover();
  if (live_.empty() && !finishing_) {
    // The state lived only in the workers' memory: new ones would start the run over.
    t.failure = "every worker of the elastic job failed; no state is left to go on from";
    return t;
  }
  t.started = fill(relays);
  if (!t.started.empty() && static_cast<int>(live_.size()) >= plan_.options.min_np) {
    publish(std::to_string(t.started.size()) + " worker(s) added");
  }
  const int min_np = plan_.options.min_np;
  if (finishing_ || static_cast<int>(live_.size()) >= min_np) {
    below_min_ = false;
    return t;
  }
  t.waiting = true;
  if (!below_min_) {
    below_min_ = true;
    below_min_since_ = Clock::now();
    say("below --min-np: " + std::to_string(live_.size()) + " of " + std::to_string(min_np) +
        " workers; waiting up to " +
        std::to_string(static_cast<int64_t>(plan_.options.elastic_timeout)) + " s for slots");
  }
  auto waited = std::chrono::duration<double>(Clock::now() - below_min_since_).count();
  if (waited >= plan_.options.elastic_timeout) t.failure = missing_slots_message();
  return t;
}

void ElasticJob::discover() {
  const Options& o = plan_.options;
  next_discovery_ =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.discovery_interval * 1000));
  try {
    hosts_ = discover_hosts(o.discovery_script, kDiscoveryTimeout);
  } catch (const UsageError& e) {
    say(std::string(e.what()) + "; keeping the hosts known before");
  }
}

std::vector<Child> ElasticJob::fill(std::vector<std::unique_ptr<LineRelay>>& relays) {
  std::vector<Child> started;
  if (finishing_) return started;
  const int max_np = plan_.options.max_np > 0 ? plan_.options.max_np : INT_MAX;
  for (const HostSlots& h : hosts_) {
    while (static_cast<int>(live_.size()) < max_np && free_slots(h.host) > 0) {
      started.push_back(start_worker(h.host, relays));
    }
  }
  return started;
}

int ElasticJob::recent_failures(const std::string& host) {
  auto& times = failures_[host];
  const double cooldown = plan_.options.blacklist_cooldown;
  if (cooldown > 0) {
    const auto horizon =
        Clock::now() - std::chrono::milliseconds(static_cast<int64_t>(cooldown * 1000));
    times.erase(std::remove_if(times.begin(), times.end(),
                               [&](Clock::time_point t) { return t < horizon; }),
                times.end());
  }
  return static_cast<int>(times.size());
}

int ElasticJob::free_slots(const std::string& host) {
  const int failed = recent_failures(host);
  if (failed >= kBlacklistAfter) return 0;
  int slots = 0;
  for (const HostSlots& h : hosts_) {
    if (h.host == host) slots += h.slots;
  }
  int used = failed;
  for (const Worker& w : live_) used += w.host == host ? 1 : 0;
  return slots - used;
}

void ElasticJob::publish(const std::string& why) {
  std::vector<er::Member> members;
  std::string names;
  for (const Worker& w : live_) {
    members.push_back({w.id, w.host});
    names += (names.empty() ? "" : ", ") + w.id + "@" + w.host;
  }
  ++round_;
  store_.set(er::round_key(round_), er::encode(members));
  store_.set(er::kLatestKey, std::to_string(round_));
  say("elastic round " + std::to_string(round_) + " (" + why +
      "): " + std::to_string(members.size()) + " workers: " + names);
}

std::string ElasticJob::missing_slots_message() {
  const int missing = plan_.options.min_np - static_cast<int>(live_.size());
  std::string known;
  for (const HostSlots& h : hosts_) {
    const int failed = recent_failures(h.host);
    known += (known.empty() ? "" : ", ") + h.host + ":" + std::to_string(h.slots) +
             (failed >= kBlacklistAfter ? " (blacklisted)"
              : failed > 0              ? " (" + std::to_string(failed) + " failed)"
                                        : "");
  }
  return "elastic job below --min-np " + std::to_string(plan_.options.min_np) + " for " +
         std::to_string(static_cast<int64_t>(plan_.options.elastic_timeout)) +
         " s: " + std::to_string(live_.size()) + " workers alive, " + std::to_string(missing) +
         " slot(s) missing (hosts: " + (known.empty() ? "none" : known) + ")";
}

}  // namespace chorus::run
