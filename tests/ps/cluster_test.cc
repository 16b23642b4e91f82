// ClusterSpec parsing and checks (by error type and message) and cluster_secret().
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <future>

#include "chorus/error.h"
#include "chorus/ps/cluster.h"

namespace chorus::ps {
namespace {

using ::testing::HasSubstr;

std::string tf_config(const std::string& cluster, const std::string& type, int index) {
  return R"({"cluster": {)" + cluster + R"(}, "task": {"type": ")" + type + R"(", "index": )" +
         std::to_string(index) + "}}";
}

const char* kFull =
    R"("chief": ["h0:2000"], "worker": ["h1:2001", "h2:2002"], "ps": ["h3:2003", "h4:2004"])";

void expect_invalid(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no InvalidArgument; expected one mentioning: " << part;
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(part));
  }
}

TEST(ClusterSpec, ParsesTfConfig) {
  ClusterSpec spec = ClusterSpec::from_tf_config(tf_config(kFull, "ps", 1));
  EXPECT_EQ(spec.role, Role::kPs);
  EXPECT_EQ(spec.task_index, 1);
  EXPECT_EQ(spec.chief, "h0:2000");
  EXPECT_EQ(spec.num_workers(), 2);
  EXPECT_EQ(spec.num_ps(), 2);
  EXPECT_EQ(spec.address(), "h4:2004");
  EXPECT_EQ(ClusterSpec::from_tf_config(tf_config(kFull, "chief", 0)).address(), "h0:2000");
  EXPECT_STREQ(role_name(Role::kWorker), "worker");
}

TEST(ClusterSpec, TfConfigErrorsNameTheProblem) {
  auto parse = [](const std::string& cluster, const std::string& type, int index) {
    return [=] { ClusterSpec::from_tf_config(tf_config(cluster, type, index)); };
  };
  expect_invalid(parse(R"("chief": ["h0:1"], "worker": ["h1:1"])", "worker", 0),
                 "TF_CONFIG: no 'ps' tasks: ParameterServerStrategy needs at least one 'ps' task");
  expect_invalid(parse(R"("worker": ["h1:1"], "ps": ["h2:1"])", "worker", 0),
                 "TF_CONFIG: no 'chief' task");
  expect_invalid(parse(R"("chief": ["h0:1"], "ps": ["h2:1"])", "ps", 0),
                 "needs at least one 'worker' task");
  expect_invalid(parse(kFull, "worker", 2),
                 "task.index 2 is not below the number of worker tasks (2)");
  expect_invalid(
      parse(R"("chief": ["h0:1"], "worker": ["h1:1"], "ps": ["h2:1"], "evaluator": ["h3:1"])",
            "evaluator", 0),
      "'evaluator' is not a task of a parameter-server cluster");
  expect_invalid(parse(R"("chief": ["h0"], "worker": ["h1:1"], "ps": ["h2:1"])", "worker", 0),
                 "TF_CONFIG: chief: malformed address 'h0'");
  expect_invalid(parse(R"("chief": ["h0:1"], "worker": ["h1:1"], "ps": ["h2:99999"])", "worker", 0),
                 "ps 0: malformed address 'h2:99999'");
  expect_invalid(parse(R"("chief": ["h0:1"], "worker": ["h1:1"], "ps": ["h1:1"])", "worker", 0),
                 "address h1:1 is used by both worker 0 and ps 0");
  expect_invalid([] { ClusterSpec::from_tf_config("{not json"); }, "TF_CONFIG: malformed JSON");
}

TEST(ClusterSpec, ParsesFlags) {
  ClusterSpec spec = ClusterSpec::from_flags("p0:1,p1:2", "w0:3", "c:4", "worker", 0);
  EXPECT_EQ(spec.role, Role::kWorker);
  EXPECT_EQ(spec.ps, (std::vector<std::string>{"p0:1", "p1:2"}));
  EXPECT_EQ(spec.address(), "w0:3");
}

TEST(ClusterSpec, FlagErrorsNameTheProblem) {
  expect_invalid([] { ClusterSpec::from_flags("p:1", "w:2", "c:3", "boss", 0); },
                 "--job_name: 'boss' is not a task of a parameter-server cluster");
  expect_invalid([] { ClusterSpec::from_flags("p:1", "w:2", "c:3", "worker", 1); },
                 "flags: task index 1 is not below the number of worker tasks (1)");
  expect_invalid([] { ClusterSpec::from_flags("", "w:2", "c:3", "worker", 0); },
                 "needs at least one 'ps' task");
  expect_invalid([] { ClusterSpec::from_flags("p:1", "w:2", "", "worker", 0); }, "no 'chief' task");
  expect_invalid([] { ClusterSpec::from_flags("p:1,,p:2", "w:2", "c:3", "ps", 0); },
                 "--ps_hosts: empty address");
  expect_invalid([] { ClusterSpec::from_flags("p:x", "w:2", "c:3", "ps", 0); },
                 "malformed address 'p:x'");
}

TEST(ClusterSpec, ValidateCatchesHandBuiltMistakes) {
  ClusterSpec spec;
  spec.chief = "c:1";
  spec.workers = {"w:2"};
  spec.ps = {"p:3"};
  EXPECT_NO_THROW(spec.validate());
  spec.role = Role::kChief;
  spec.task_index = 1;
  expect_invalid([&] { spec.validate(); },
                 "task index 1 is not below the number of chief tasks (1)");
}

TEST(ClusterSpec, FromEnv) {
  ::unsetenv("TF_CONFIG");
  expect_invalid([] { ClusterSpec::from_env(); }, "TF_CONFIG is not set");
  ::setenv("TF_CONFIG", tf_config(kFull, "worker", 1).c_str(), 1);
  EXPECT_EQ(ClusterSpec::from_env().address(), "h2:2002");
  ::unsetenv("TF_CONFIG");
}

TEST(SplitAddress, ParsesAndRejects) {
  EXPECT_EQ(split_address("10.0.0.1:80", "x"),
            std::make_pair(std::string("10.0.0.1"), uint16_t{80}));
  EXPECT_EQ(split_address("[::1]:9", "x").first, "::1");
  expect_invalid([] { split_address("nohost", "ps 3"); }, "ps 3: malformed address 'nohost'");
  expect_invalid([] { split_address("h:0", "x"); }, "malformed address 'h:0'");
}

class ClusterSecret : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("CHORUS_SECRET");
    ::unsetenv("CHORUS_SECRET_FILE");
    // A chief address of our own, so parallel runs never share a file.
    port_ = 20000 + static_cast<int>(::getpid() % 40000);
    spec_.chief = "127.0.0.1:" + std::to_string(port_);
    spec_.workers = {"127.0.0.1:1"};
    spec_.ps = {"localhost:2"};
    path_ = "/tmp/chorus-" + std::to_string(::getuid()) + "/ps-secret-127.0.0.1_" +
            std::to_string(port_);
    ::unlink(path_.c_str());
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  int port_ = 0;
  ClusterSpec spec_;
  std::string path_;
};

TEST_F(ClusterSecret, EnvironmentWins) {
  ::setenv("CHORUS_SECRET", "from-env", 1);
  EXPECT_EQ(cluster_secret(spec_).bytes(), "from-env");
  ::unsetenv("CHORUS_SECRET");
}

TEST_F(ClusterSecret, LoopbackTasksShareOneFile) {
  // Tasks racing to create it all end up with the same secret.
  std::vector<std::future<std::string>> tasks;
  for (int i = 0; i < 6; ++i) {
    tasks.push_back(std::async(std::launch::async, [&] { return cluster_secret(spec_).bytes(); }));
  }
  std::string first = tasks[0].get();
  EXPECT_EQ(first.size(), 64u);
  for (size_t i = 1; i < tasks.size(); ++i) EXPECT_EQ(tasks[i].get(), first);
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(cluster_secret(spec_).bytes(), first);
}

TEST_F(ClusterSecret, RemoteClusterNeedsASecret) {
  spec_.ps = {"10.1.2.3:2"};
  expect_invalid([&] { cluster_secret(spec_); }, "needs a secret: set CHORUS_SECRET");
}

}  // namespace
}  // namespace chorus::ps
