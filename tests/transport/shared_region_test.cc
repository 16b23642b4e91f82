// Shared regions (transport/shm/shared_region.h): a peer's region maps only when the file is
// exactly what its creator announced — size, seals, header and nonce — and the mapping is
// the creator's memory. Opening through /proc/<pid>/fd is exercised here on this process's
// own descriptors, as a rank's links do for a peer's.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

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
