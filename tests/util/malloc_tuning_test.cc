// tune_malloc_for_training: each case runs in a child process of its own (the tuning is
// per process, once), with the environment it tests. Whether a block was mmap()ed is read
// from mallinfo2's count of mmapped blocks, whether the heap kept freed memory from its
// releasable top (keepcost).
#include "util/malloc_tuning.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace chorus {
namespace {

constexpr size_t kBlock = size_t{8} << 20;  // over glibc's default 128 KiB threshold

// Exits 0 when the tuning's result and an 8 MiB block's placement are as expected.
[[noreturn]] void check_in_child(bool want_applied, const std::string& want_why) {
  MallocTuning t = tune_malloc_for_training();
  const size_t mmapped_before = mallinfo2().hblks;
  // Through volatile pointers: the compiler may not drop an unused malloc/free pair.
  void* (*volatile allocate)(size_t) = std::malloc;
  void (*volatile release)(void*) = std::free;
  void* p = allocate(kBlock);
  const bool mmapped = mallinfo2().hblks > mmapped_before;
  release(p);
  const bool kept = mallinfo2().keepcost >= kBlock;
  std::fprintf(stderr, "applied=%d why='%s' mmapped=%d kept=%d\n", t.applied, t.why.c_str(),
               mmapped, kept);
  const bool ok = t.applied == want_applied && t.why.find(want_why) != std::string::npos &&
                  mmapped == !want_applied && kept == want_applied &&
                  tune_malloc_for_training().applied == t.applied;
  _exit(ok ? 0 : 1);
}

// Under ASan or TSan, malloc is the sanitizer's allocator: glibc's placement of blocks, which
// these tests read, does not apply.
constexpr bool kSanitizerMalloc =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

class MallocTuning : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kSanitizerMalloc) GTEST_SKIP() << "malloc is the sanitizer's here, not glibc's";
  }
};

void clean_env() {
  for (const char* name : {"CHORUS_MALLOC_TUNING", "GLIBC_TUNABLES", "LD_PRELOAD",
                           "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}) {
    unsetenv(name);
  }
}

TEST_F(MallocTuning, LargeBlocksComeFromTheHeapAndStayThere) {
  EXPECT_EXIT(
      {
        clean_env();
        check_in_child(true, "heap blocks up to 32 MiB");
      },
      ::testing::ExitedWithCode(0), "applied=1");
}

TEST_F(MallocTuning, TurnedOffByTheVariable) {
  EXPECT_EXIT(
      {
        clean_env();
        setenv("CHORUS_MALLOC_TUNING", "0", 1);
        check_in_child(false, "CHORUS_MALLOC_TUNING=0");
      },
      ::testing::ExitedWithCode(0), "applied=0");
}

TEST_F(MallocTuning, TheUsersOwnSettingsWin) {
  EXPECT_EXIT(
      {
        clean_env();
        setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=512:glibc.malloc.arena_max=2", 1);
        check_in_child(false, "GLIBC_TUNABLES sets glibc.malloc");
      },
      ::testing::ExitedWithCode(0), "applied=0");
  EXPECT_EXIT(
      {
        clean_env();
        setenv("MALLOC_TRIM_THRESHOLD_", "131072", 1);
        check_in_child(false, "MALLOC_TRIM_THRESHOLD_ is set");
      },
      ::testing::ExitedWithCode(0), "applied=0");
  EXPECT_EXIT(
      {
        clean_env();
        setenv("LD_PRELOAD", "libjemalloc.so.2", 1);
        check_in_child(false, "LD_PRELOAD");
      },
      ::testing::ExitedWithCode(0), "applied=0");
}

TEST_F(MallocTuning, OtherTunablesLeaveItOn) {
  EXPECT_EXIT(
      {
        clean_env();
        setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=512", 1);
        check_in_child(true, "heap blocks");
      },
      ::testing::ExitedWithCode(0), "applied=1");
}

}  // namespace
}  // namespace chorus
