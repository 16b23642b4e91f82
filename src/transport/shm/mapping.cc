#include "transport/shm/mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "chorus/error.h"

namespace chorus::transport::shm {

Mapping::Mapping(Mapping&& other) noexcept : base_(other.base_), size_(other.size_) {
  other.base_ = nullptr;
  other.size_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    reset();
    base_ = other.base_;
    size_ = other.size_;
    other.base_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void Mapping::reset() {
  if (base_ != nullptr) ::munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
}

Mapping Mapping::map(int fd, size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    CHORUS_THROW(IoError, "mmap of ", size,
                 " bytes of shared memory failed: ", std::strerror(errno));
  }
  Mapping m;
  m.base_ = static_cast<char*>(p);
  m.size_ = size;
  return m;
}

net::Fd create_sealed_memfd(const char* name, size_t size) {
  net::Fd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) CHORUS_THROW(IoError, "memfd_create failed: ", std::strerror(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    CHORUS_THROW(IoError, "sizing ", size,
                 " bytes of shared memory failed: ", std::strerror(errno));
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    CHORUS_THROW(IoError, "sealing shared memory failed: ", std::strerror(errno));
  }
  return fd;
}

bool has_size_and_shrink_seal(int fd, size_t size) {
  struct stat st {};
  int seals = ::fcntl(fd, F_GET_SEALS);
  return ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == size && seals >= 0 &&
         (seals & F_SEAL_SHRINK) != 0;
}

}  // namespace chorus::transport::shm
