#include "transport/shm/mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "chorus/error.h"

namespace chorus::transport::shm {
namespace {

// The kOnTouch mappings, each with its own descriptor of the file, which a forked child maps
// again privately at the same address. The lock is held across fork() (pthread_atfork), so
// the child finds the list whole.
struct OnTouchMapping {
  char* base;
  size_t size;
  int fd;
};

std::mutex& on_touch_mu() {
  static auto* mu = new std::mutex;  // never destroyed: fork may run during exit
  return *mu;
}

std::vector<OnTouchMapping>& on_touch_mappings() {
  static auto* list = new std::vector<OnTouchMapping>;
  return *list;
}

void make_private_in_child() {
  for (const OnTouchMapping& m : on_touch_mappings()) {
    // Same address, same contents; from now on the child's writes are its own. NORESERVE:
    // a private writable mapping is otherwise charged in full against the commit limit.
    // Where the kernel still refuses (strict overcommit), read-only: a write then faults
    // instead of reaching the parent.
    const int flags = MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE;
    if (::mmap(m.base, m.size, PROT_READ | PROT_WRITE, flags, m.fd, 0) == MAP_FAILED &&
        ::mmap(m.base, m.size, PROT_READ, flags, m.fd, 0) == MAP_FAILED) {
      ::abort();  // the child would share writes with its parent: it cannot go on
    }
  }
  on_touch_mu().unlock();
}

void register_on_touch(char* base, size_t size, int fd) {
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork([] { on_touch_mu().lock(); }, [] { on_touch_mu().unlock(); },
                     make_private_in_child);
  });
  int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    CHORUS_THROW(IoError, "dup of a shared-memory descriptor failed: ", std::strerror(errno));
  }
  std::lock_guard<std::mutex> lock(on_touch_mu());
  on_touch_mappings().push_back({base, size, own});
}

void unregister_on_touch(char* base) {
  std::lock_guard<std::mutex> lock(on_touch_mu());
  auto& list = on_touch_mappings();
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].base != base) continue;
    ::close(list[i].fd);
    list[i] = list.back();
    list.pop_back();
    return;
  }
}

}  // namespace

Mapping::Mapping(Mapping&& other) noexcept
    : base_(other.base_), size_(other.size_), on_touch_(other.on_touch_) {
  other.base_ = nullptr;
  other.size_ = 0;
  other.on_touch_ = false;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    reset();
    base_ = other.base_;
    size_ = other.size_;
    on_touch_ = other.on_touch_;
    other.base_ = nullptr;
    other.size_ = 0;
    other.on_touch_ = false;
  }
  return *this;
}

void Mapping::reset() {
  if (on_touch_) unregister_on_touch(base_);
  if (base_ != nullptr) ::munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
  on_touch_ = false;
}

Mapping Mapping::map(int fd, size_t size, Pages pages) {
  const int populate = pages == Pages::kPopulated ? MAP_POPULATE : 0;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | populate, fd, 0);
  if (p == MAP_FAILED) {
    CHORUS_THROW(IoError, "mmap of ", size,
                 " bytes of shared memory failed: ", std::strerror(errno));
  }
  Mapping m;
  m.base_ = static_cast<char*>(p);
  m.size_ = size;
  if (pages == Pages::kOnTouch) {
    register_on_touch(m.base_, size, fd);  // on failure m unmaps (not yet registered)
    m.on_touch_ = true;
  }
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
