// The timeline: valid Chrome-trace JSON with every phase, from the option and from the
// run-time start/stop calls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine_harness.h"

namespace chorus::engine::testing {
namespace {

std::string temp_path(const char* tag) {
  return (::testing::TempDir() + "chorus_timeline_" + tag + "_" + std::to_string(::getpid()) +
          ".json");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// python3's json module as the validating parser; checks that each phase occurs.
int json_check(const std::string& path, const std::string& phases) {
  std::string cmd =
      "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
      "n={e[\"name\"] for e in d}; "
      "m=[p for p in sys.argv[2].split(\",\") if p not in n]; "
      "print(\"missing\", m) if m else None; sys.exit(1 if m else 0)' " +
      path + " " + phases;
  return std::system(cmd.c_str());
}

void run_step(Engine& e, int r, const std::string& prefix) {
  std::vector<std::vector<float>> bufs(6, std::vector<float>(100, static_cast<float>(r)));
  std::vector<Handle> hs;
  for (size_t i = 0; i < bufs.size(); ++i) {
    hs.push_back(e.allreduce(prefix + "grad\"" + std::to_string(i), bufs[i].data(), bufs[i].data(),
                             DataType::kFloat32, {100}));
  }
  std::vector<float> x(3, 1.f);
  hs.push_back(e.allgather(prefix + "gather", x.data(), DataType::kFloat32, {1, 3}));
  for (auto& h : hs) h.wait(kWait);
}

TEST(EngineTimeline, FromOptionsIsValidJsonWithEveryPhase) {
  std::string path = temp_path("opt");
  EngineOptions o = test_options();
  o.timeline_path = path;
  o.cycle_time = std::chrono::milliseconds(5);  // let the step's tensors gather into one cycle
  {
    EngineGroup g(2, o);
    g.run([&](int r, Engine& e) {
      for (int s = 0; s < 3; ++s) run_step(e, r, "");
    });
  }  // shutdown closes the array
  std::string text = read_file(path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.substr(text.find_last_not_of("\n"), 1), "]");
  EXPECT_EQ(0, json_check(path,
                          "NEGOTIATE,QUEUE,MEMCPY_IN_FUSION_BUFFER,ALLREDUCE,"
                          "MEMCPY_OUT_FUSION_BUFFER,ALLGATHER,thread_name"));
  std::remove(path.c_str());
}

TEST(EngineTimeline, StartAndStopAtRunTime) {
  std::string path = temp_path("api");
  EngineGroup g(2);
  g.run([&](int r, Engine& e) { run_step(e, r, "before/"); });
  g[1].start_timeline(path);
  g.run([&](int r, Engine& e) { run_step(e, r, "during/"); });
  g[1].stop_timeline();
  g.run([&](int r, Engine& e) { run_step(e, r, "after/"); });
  EXPECT_EQ(0, json_check(path, "NEGOTIATE,ALLREDUCE,ALLGATHER"));
  std::string text = read_file(path);
  EXPECT_EQ(text.find("before/"), std::string::npos);
  EXPECT_EQ(text.find("after/"), std::string::npos);
  EXPECT_NE(text.find("during/grad\\\"0"), std::string::npos);
  // Collectives name the plan the communicator ran (tcp, 100 floats: recursive doubling).
  EXPECT_NE(text.find("\"plan\":\"recursive doubling\""), std::string::npos) << text;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace chorus::engine::testing
