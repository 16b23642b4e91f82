// save_state / restore_state: values, optimizer slots, steps and versions come back, and
// a file that does not fit is InvalidArgument.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps_test_util.h"

namespace chorus::ps::testing {
namespace {

CreateOptions adam() {
  CreateOptions o;
  o.optimizer.kind = OptimizerConfig::Kind::kAdam;
  o.optimizer.learning_rate = 0.01;
  return o;
}

class SaveRestore : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = test_layout(2);
    client_ = make_client(cluster_);
    client_->create(layout_, Arrays(layout_.variables, 0.5f).in(), adam());
  }
  void push(float g, double lr = -1) {
    client_->push(Arrays::filled(layout_.variables, g).in(), 0, lr);
  }
  Arrays values() {
    Arrays got = Arrays::filled(layout_.variables, 0.0f);
    client_->pull(got.out());
    return got;
  }

  LocalCluster cluster_{2};
  ModelLayout layout_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(SaveRestore, RoundTripRestoresSlotsStepsAndVersion) {
  push(1.0f);
  push(-0.5f, 0.02);
  auto files = client_->save_state();
  ASSERT_EQ(files.size(), 2u);
  ASSERT_EQ(files.count("ps-0") + files.count("ps-1"), 2u);
  Arrays at_save = values();
  push(0.25f);
  Arrays continued = values();  // the third step taken from the saved state

  push(3.0f, 0.5);  // wander off: other values, slots, steps and learning rate
  client_->restore_state(files);
  EXPECT_EQ(values().data, at_save.data);
  EXPECT_EQ(client_->stats(0).version, 2);
  push(0.25f);  // Adam's step 3 again: same slots, step count and learning rate
  EXPECT_EQ(values().data, continued.data);
}

TEST_F(SaveRestore, ARestartedClusterTakesTheState) {
  push(1.0f);
  auto files = client_->save_state();
  Arrays saved = values();
  LocalCluster fresh(2);
  auto chief = make_client(fresh);
  chief->create(layout_, Arrays(layout_.variables, 9.0f).in(), adam());
  chief->restore_state(files);
  Arrays got = Arrays::filled(layout_.variables, 0.0f);
  EXPECT_EQ(chief->pull(got.out()), 1);
  EXPECT_EQ(got.data, saved.data);
}

TEST_F(SaveRestore, MismatchedFilesAreInvalidArgument) {
  auto files = client_->save_state();
  auto expect_invalid = [&](std::map<std::string, std::string> f, const std::string& part) {
    try {
      client_->restore_state(f);
      ADD_FAILURE() << "no InvalidArgument for " << part;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(part));
    }
  };
  auto truncated = files;
  truncated["ps-1"].pop_back();
  expect_invalid(truncated, "ps state file");
  auto missing = files;
  missing.erase("ps-0");
  expect_invalid(missing, "no file 'ps-0'");
  auto extra = files;
  extra["ps-2"] = files["ps-0"];
  expect_invalid(extra, "unexpected file 'ps-2'");
  auto swapped = files;
  std::swap(swapped["ps-0"], swapped["ps-1"]);
  expect_invalid(swapped, "with another layout");

  LocalCluster other(2);
  auto sgd_client = make_client(other);
  sgd_client->create(layout_, Arrays(layout_.variables, 0).in(), sgd(0.1));
  EXPECT_THROW(sgd_client->restore_state(files), InvalidArgument);  // Adam file, SGD ps
  client_->restore_state(files);                                    // still usable
}

}  // namespace
}  // namespace chorus::ps::testing
