// Shared regions (transport/shm/shared_region.h): a peer's region maps only when the file is
// exactly what its creator announced — size, seals, header and nonce — and the mapping is
// the creator's memory. Opening through /proc/<pid>/fd is exercised here on this process's
// own descriptors, as a rank's links do for a peer's.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "chorus/error.h"
#include "transport/shm/shared_region.h"

namespace chorus::transport::shm {
namespace {

net::Fd reopen(int fd) {
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  return net::Fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
}

// The AuthError's message, or "" when map_peer accepted.
std::string refusal(int fd, const RegionIdentity& announced) {
  try {
    Region::map_peer(reopen(fd), announced);
  } catch (const AuthError& e) {
    return e.what();
  }
  return "";
}

TEST(SharedRegion, APeerMapsTheCreatorsMemory) {
  Region mine = Region::create(10000);
  ASSERT_EQ(mine.data_bytes(), 10000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(mine.data()) % 4096, 0u);
  for (size_t i = 0; i < 10000; ++i) ASSERT_EQ(mine.data()[i], 0) << "not zeroed at " << i;
  Region theirs = Region::map_peer(reopen(mine.identity().fd), mine.identity());
  std::memcpy(mine.data(), "written here", 13);
  EXPECT_STREQ(theirs.data(), "written here");
  mine.close_descriptor();
  EXPECT_EQ(mine.identity().fd, -1);
  theirs.data()[9999] = 'x';  // the mapping outlives the descriptor
  EXPECT_EQ(mine.data()[9999], 'x');
}

// Pages of `region` the kernel has in memory (mincore), the header page included.
size_t resident_pages(const Region& region) {
  const size_t page = 4096, pages = (kRegionHeaderBytes + region.data_bytes() + page - 1) / page;
  std::vector<unsigned char> in(pages);
  EXPECT_EQ(::mincore(region.data() - kRegionHeaderBytes, pages * page, in.data()), 0);
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(SharedRegion, PagesOnTouchComeIntoMemoryOnlyWhenTouched) {
  const size_t gib = size_t{1} << 30;
  Region heap = Region::create(gib, Pages::kOnTouch);
  Region theirs = Region::map_peer(reopen(heap.identity().fd), heap.identity(), Pages::kOnTouch);
  EXPECT_EQ(resident_pages(heap), 1u);  // the header
  heap.data()[5 * 4096] = 7;
  heap.data()[gib - 1] = 9;
  EXPECT_EQ(resident_pages(heap), 3u);
  EXPECT_EQ(theirs.data()[5 * 4096], 7);
  EXPECT_EQ(theirs.data()[gib - 1], 9);
  Region populated = Region::create(64 * 4096);
  EXPECT_EQ(resident_pages(populated), 65u);
}

// What a forked child writes into memory with pages on touch stays in the child: neither
// this process nor a peer mapping the same file sees it. The child still reads what was
// there at the fork.
TEST(SharedRegion, AForkedChildsWritesToPagesOnTouchStayInTheChild) {
  Region heap = Region::create(1 << 20, Pages::kOnTouch);
  Region theirs = Region::map_peer(reopen(heap.identity().fd), heap.identity(), Pages::kOnTouch);
  std::memcpy(heap.data(), "parent", 7);
  std::memcpy(heap.data() + 8192, "parent", 7);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    bool saw = std::strcmp(heap.data(), "parent") == 0 && std::strcmp(theirs.data(), "parent") == 0;
    std::memcpy(heap.data(), "child!", 7);
    std::memcpy(theirs.data() + 8192, "child!", 7);
    bool own = std::strcmp(heap.data(), "child!") == 0;
    ::_exit(saw && own ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child did not see the memory as at the fork";
  EXPECT_STREQ(heap.data(), "parent");
  EXPECT_STREQ(theirs.data(), "parent");
  EXPECT_STREQ(heap.data() + 8192, "parent");
  EXPECT_STREQ(theirs.data() + 8192, "parent");
}

TEST(SharedRegion, AnythingOtherThanAnnouncedIsRefused) {
  Region mine = Region::create(8192);
  RegionIdentity id = mine.identity();
  EXPECT_EQ(refusal(id.fd, id), "");

  RegionIdentity other_nonce = id;
  other_nonce.nonce[1] ^= 1;
  EXPECT_NE(refusal(id.fd, other_nonce).find("header other than announced"), std::string::npos);

  RegionIdentity other_size = id;
  other_size.data_bytes = 3 * 4096;
  EXPECT_NE(refusal(id.fd, other_size).find("wrong size or no seals"), std::string::npos);
  other_size.data_bytes = 8000;  // rounds up to the same pages: the header tells
  EXPECT_NE(refusal(id.fd, other_size).find("header other than announced"), std::string::npos);
  other_size.data_bytes = 0;
  EXPECT_NE(refusal(id.fd, other_size).find("announced a shared region of 0 bytes"),
            std::string::npos);
  other_size.data_bytes = kMaxRegionBytes + 1;
  EXPECT_NE(refusal(id.fd, other_size).find("bytes"), std::string::npos);

  // A file of the right size without seals: the peer could shrink it under our mapping.
  net::Fd unsealed(::memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_TRUE(unsealed.valid());
  ASSERT_EQ(::ftruncate(unsealed.get(), 4096 + 8192), 0);
  EXPECT_NE(refusal(unsealed.get(), id).find("wrong size or no seals"), std::string::npos);
}

TEST(SharedRegion, BadSizesAreInvalidArguments) {
  EXPECT_THROW(Region::create(0), InvalidArgument);
  EXPECT_THROW(Region::create(kMaxRegionBytes + 1), InvalidArgument);
}

}  // namespace
}  // namespace chorus::transport::shm
