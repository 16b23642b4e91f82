// The side-effecting part of openblas.h: asking OpenBLAS in a child process, and setting
// OPENBLAS_CORETYPE.
//
// Why a forked child that dlopen()s the library, rather than dlopen() in chorusrun or
// running a program: loading OpenBLAS starts its thread pool and allocates its buffers, which
// chorusrun would then carry (and fork into every rank) for the whole job, and a BLAS that
// crashes while loading must not take the launcher with it. A child that exits right after
// costs about as much as the load itself and needs no helper program to be installed. It is
// the library the workers will load because it is found the same way: by the dynamic
// loader, through the alternatives system's libblas.so.3.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>

#include "openblas.h"
#include "relay.h"

namespace chorus::run {
namespace {

constexpr int kProbeTimeoutMs = 5000;

// In the child: quiet, one thread, then the core's name on `out`.
[[noreturn]] void probe_child(int out) {
  int null_fd = ::open("/dev/null", O_WRONLY);
  if (null_fd >= 0) {
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
  }
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  ::unsetenv("OPENBLAS_VERBOSE");
  for (const char* lib : {"libblas.so.3", "libopenblas.so.0"}) {
    void* handle = ::dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    // dlsym on the handle also searches the library's dependencies (libopenblas.so.0);
    // a BLAS other than OpenBLAS has no such symbol, and libopenblas.so.0 is tried next.
    auto corename =
        handle ? reinterpret_cast<const char* (*)()>(::dlsym(handle, "openblas_get_corename"))
               : nullptr;
    const char* name = corename ? corename() : nullptr;
    if (name == nullptr) continue;
    std::string text(name);
    ssize_t ignored = ::write(out, text.data(), text.size());
    (void)ignored;
    ::_exit(0);
  }
  ::_exit(1);
}

// Reads what the child writes until it closes the pipe or the deadline passes. chorusrun's
// SIGCHLD handler (supervise.h) interrupts poll() when the child exits: that is retried.
std::string read_until_closed(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string text;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return "";
    char buf[256];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return text;
    if (n < 0 && errno != EINTR) return "";
    if (n > 0 && text.size() < 1024) text.append(buf, static_cast<size_t>(n));
  }
}

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string probe_openblas_core() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "";
  pid_t pid = ::fork();
  if (pid == 0) probe_child(fds[1]);
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return "";
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kProbeTimeoutMs);
  std::string core = read_until_closed(fds[0], deadline);
  ::close(fds[0]);
  ::kill(pid, SIGKILL);  // no-op once it has exited; stops a hung probe
  int status = 0;
  ::waitpid(pid, &status, 0);
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return ok ? core : "";
}

void tune_openblas_for_local_workers(bool verbose) {
  if (const char* user = std::getenv("OPENBLAS_CORETYPE")) {
    if (verbose) say(std::string("OPENBLAS_CORETYPE=") + user + " as set by the user");
    return;
  }
  std::string core = probe_openblas_core();
  CpuFeatures cpu = parse_cpu_features(read_file("/proc/cpuinfo"));
  std::optional<std::string> value = choose_openblas_coretype(cpu, core, nullptr);
  if (!value) {
    if (verbose) say("OpenBLAS core: " + (core.empty() ? "none found" : core) + " (kept)");
    return;
  }
  ::setenv("OPENBLAS_CORETYPE", value->c_str(), 1);
  say("OpenBLAS would run its generic " + core + " kernels on this " +
      (cpu.avx512 ? "AVX-512" : "AVX2") + " CPU: OPENBLAS_CORETYPE=" + *value +
      " for the processes started on this host (set the variable yourself to choose)");
}

}  // namespace chorus::run
