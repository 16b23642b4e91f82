// Store semantics, run against both TcpStore (server + clients over loopback) and FileStore
// (a temporary directory): every test here must pass on both.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "chorus/error.h"
#include "chorus/store.h"
#include "test_util.h"

namespace chorus {
namespace {

using std::chrono::milliseconds;
using testing::seconds_since;

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, secret_);
  }

  // A new client: for TCP its own connection, for files its own FileStore object (as
  // another process would have).
  std::unique_ptr<Store> connect() {
    if (server_) {
      return std::make_unique<TcpStoreClient>("127.0.0.1", server_->port(), secret_,
                                              milliseconds(5000));
    }
    return std::make_unique<FileStore>(dir_.path() + "/store", secret_);
  }

  Secret secret_ = Secret::generate();
  testing::TempDir dir_;
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_P(StoreTest, SetGetReplaceAndRemove) {
  auto store = connect();
  store->set("alpha", "one");
  EXPECT_EQ(store->get("alpha", milliseconds(1000)), "one");
  store->set("alpha", "two");
  EXPECT_EQ(connect()->get("alpha", milliseconds(1000)), "two");  // seen by another client
  EXPECT_TRUE(store->remove("alpha"));
  EXPECT_FALSE(store->remove("alpha"));
  EXPECT_FALSE(store->check({"alpha"}));
  store->set("empty", "");
  EXPECT_EQ(store->get("empty", milliseconds(1000)), "");
}

TEST_P(StoreTest, AddCountsFromZeroAndRefusesNonIntegers) {
  auto store = connect();
  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", -7), -2);
  EXPECT_EQ(store->add("counter", 0), -2);
  EXPECT_EQ(store->get("counter", milliseconds(1000)), "-2");
  store->set("text", "hello");
  try {
    store->add("text", 1);
    FAIL() << "add on a non-integer value did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'text'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store->get("text", milliseconds(1000)), "hello");  // unchanged
  store->set("big", std::to_string(INT64_MAX));
  EXPECT_THROW(store->add("big", 1), InvalidArgument);
  EXPECT_EQ(store->add("counter", 3), 1);  // the store still works after refusals
}

TEST_P(StoreTest, CheckDoesNotWait) {
  auto store = connect();
  store->set("a", "1");
  EXPECT_TRUE(store->check({"a"}));
  EXPECT_TRUE(store->check({}));
  auto start = Clock::now();
  EXPECT_FALSE(store->check({"a", "b"}));
  EXPECT_LT(seconds_since(start), 0.5);
}

TEST_P(StoreTest, GetBlocksUntilAnotherThreadSets) {
  auto reader = connect();
  auto writer = connect();
  std::string got;
  auto start = Clock::now();
  std::thread t([&] { got = reader->get("late", milliseconds(5000)); });
  std::this_thread::sleep_for(milliseconds(150));
  writer->set("late", "arrived");
  t.join();
  EXPECT_EQ(got, "arrived");
  EXPECT_GE(seconds_since(start), 0.14);
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyExists) {
  auto waiter = connect();
  auto writer = connect();
  std::atomic<bool> done{false};
  std::thread t([&] {
    waiter->wait({"x", "y"}, milliseconds(5000));
    done = true;
  });
  writer->set("x", "1");
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(done.load()) << "wait returned with 'y' still missing";
  writer->add("y", 1);
  t.join();
  EXPECT_TRUE(done.load());
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  auto store = connect();
  auto start = Clock::now();
  try {
    store->get("never/set", milliseconds(200));
    FAIL() << "get of a missing key did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never/set'"), std::string::npos) << e.what();
  }
  EXPECT_GE(seconds_since(start), 0.19);
  EXPECT_LT(seconds_since(start), 1.5);
  store->set("after", "ok");  // a timeout does not break the store
  EXPECT_EQ(store->get("after", milliseconds(1000)), "ok");
}

TEST_P(StoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  auto store = connect();
  store->set("present", "1");
  try {
    store->wait({"present", "absent"}, milliseconds(100));
    FAIL() << "wait did not time out";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    auto missing = what.substr(what.find("missing keys:"));
    EXPECT_NE(missing.find("'absent'"), std::string::npos) << what;
    EXPECT_EQ(missing.find("'present'"), std::string::npos) << what;
  }
}

TEST_P(StoreTest, ConcurrentAddsFromManyClientsGiveExactTotals) {
  constexpr int kThreads = 16, kAdds = 40;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto store = connect();
      for (int k = 0; k < kAdds; ++k) seen[i].push_back(store->add("total", 1));
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  // Atomic adds hand out every value from 1 to N exactly once.
  for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) ASSERT_EQ(all[i], i + 1);
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));
  EXPECT_EQ(connect()->get("total", milliseconds(1000)), std::to_string(kThreads * kAdds));
}

TEST_P(StoreTest, OneStoreObjectIsSafeToShareBetweenThreads) {
  auto store = connect();
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 20; ++k) {
        std::string key = "t" + std::to_string(i) + "/" + std::to_string(k);
        store->set(key, key + "=value");
        ASSERT_EQ(store->get(key, milliseconds(1000)), key + "=value");
        store->add("shared", 2);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->get("shared", milliseconds(1000)), std::to_string(8 * 20 * 2));
}

TEST_P(StoreTest, BinaryKeysAndValuesWithNulBytesRoundTrip) {
  auto store = connect();
  std::string value;
  for (int i = 0; i < 256; ++i) value.push_back(static_cast<char>(i));
  value += std::string(3, '\0');
  const std::string key("bin\0key\xff", 8);
  store->set(key, value);
  std::string got = connect()->get(key, milliseconds(1000));
  EXPECT_EQ(got.size(), value.size());
  EXPECT_EQ(got, value);
  EXPECT_FALSE(store->check({std::string("bin\0kez\xff", 8)}));  // keys compare all bytes
}

TEST_P(StoreTest, KeyAndValueSizeLimits) {
  auto store = connect();
  const std::string max_key(4096, 'k');
  store->set(max_key, "v");
  EXPECT_EQ(store->get(max_key, milliseconds(1000)), "v");
  EXPECT_THROW(store->set(std::string(4097, 'k'), "v"), InvalidArgument);
  EXPECT_THROW(store->get("", milliseconds(10)), InvalidArgument);
  std::string big(64u << 20, 'v');
  big[12345] = '\0';
  big.back() = 'z';
  store->set("big", big);
  EXPECT_EQ(connect()->get("big", milliseconds(5000)), big);
  big.push_back('!');  // one byte over 64 MiB: refused before anything is sent
  try {
    store->set("too-big", big);
    FAIL() << "a value over 64 MiB was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(store->check({"too-big"}));
}

// A caller's over-long key list is its own mistake (InvalidArgument), refused before a
// byte is sent; a server would drop the connection for it.
TEST_P(StoreTest, KeyListLimit) {
  auto store = connect();
  EXPECT_FALSE(store->check(std::vector<std::string>(65536, "k")));
  std::vector<std::string> too_many(65537, "k");
  for (const char* call : {"check", "wait"}) {
    try {
      if (call == std::string("check")) {
        store->check(too_many);
      } else {
        store->wait(too_many, milliseconds(10));
      }
      ADD_FAILURE() << call << " accepted a list of 65537 keys";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("at most 65536 keys; got 65537"), std::string::npos)
          << e.what();
    }
  }
  store->set("k", "v");  // a TCP client's connection is still usable
  EXPECT_TRUE(store->check({"k"}));
  // A timeout on a full list names a few keys, not all 65536.
  try {
    store->wait(std::vector<std::string>(65536, "absent"), milliseconds(10));
    ADD_FAILURE() << "wait on absent keys returned";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_LT(what.size(), 1000u) << what.substr(0, 200) << "...";
    EXPECT_NE(what.find("missing keys: 'absent', "), std::string::npos) << what;
    EXPECT_NE(what.find(" and 65520 more"), std::string::npos) << what;
  }
}

TEST_P(StoreTest, PrefixStoreKeepsNamespacesApart) {
  auto store = connect();
  PrefixStore first("restart0/", *store), second("restart1/", *store);
  first.set("k", "a");
  second.set("k", "b");
  EXPECT_EQ(first.get("k", milliseconds(1000)), "a");
  EXPECT_EQ(second.get("k", milliseconds(1000)), "b");
  EXPECT_EQ(store->get("restart0/k", milliseconds(1000)), "a");
  EXPECT_EQ(first.add("n", 2), 2);
  EXPECT_TRUE(first.check({"k", "n"}));
  EXPECT_FALSE(second.check({"n"}));
  EXPECT_TRUE(second.remove("k"));
  EXPECT_THROW(second.wait({"k"}, milliseconds(50)), TimeoutError);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values("tcp", "file"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace chorus
