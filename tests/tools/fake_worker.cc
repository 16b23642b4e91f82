// A stand-in for a training program, started by chorusrun in the launcher tests.
// fake_worker MODE [ARG]:
//   env            print the launcher's variables as NAME=VALUE lines, then the secret file's mode
//   exit N         exit with code N
//   crash R        rank R raises SIGSEGV, the others sleep (until stopped)
//   lines N        print N long lines, each written in several pieces
//   sleep DIR      write DIR/pid.<rank>, then sleep until stopped
//   stubborn DIR   the same, but ignore SIGTERM (only SIGKILL stops it)
//   join R         join the launcher's store (the chorus::Job convention) unless rank == R,
//                  then exit 0 after 300 ms; rank R sleeps
//   flaky          exit 5 on restart 0 (rank 1 only), print the restart count otherwise
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "chorus/store.h"
#include "util/net.h"

namespace {

std::string var(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int rank() { return std::atoi(var("CHORUS_RANK").c_str()); }

[[noreturn]] void sleep_forever() {
  for (;;) ::pause();
}

void write_pid(const std::string& dir) {
  std::ofstream(dir + "/pid." + std::to_string(rank())) << ::getpid() << "\n";
}

void print_env() {
  for (const char* name :
       {"CHORUS_RANK", "CHORUS_SIZE", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_SIZE", "CHORUS_CROSS_RANK",
        "CHORUS_CROSS_SIZE", "CHORUS_STORE_ADDR", "CHORUS_RESTART_COUNT", "CHORUS_HOST_ID",
        "CHORUS_SECRET", "CHORUS_TEST_EXPORT", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK",
        "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
        "HOROVOD_CROSS_SIZE", "OPENBLAS_CORETYPE"}) {
    std::printf("%s=%s\n", name, var(name).c_str());
  }
  struct stat st {};
  std::string file = var("CHORUS_SECRET_FILE");
  bool ok = !file.empty() && ::stat(file.c_str(), &st) == 0 && st.st_size > 0;
  std::printf("secret_file_mode=%o\n", ok ? static_cast<unsigned>(st.st_mode & 0777) : 0u);
}

void print_lines(int n) {
  std::string payload(200, static_cast<char>('a' + rank() % 26));
  for (int i = 0; i < n; ++i) {
    std::string line =
        "rank " + std::to_string(rank()) + " line " + std::to_string(i) + " " + payload + " end\n";
    // Three write()s per line: the relay, not luck, must keep lines whole.
    size_t third = line.size() / 3;
    ::write(1, line.data(), third);
    ::write(1, line.data() + third, third);
    ::write(1, line.data() + 2 * third, line.size() - 2 * third);
  }
}

int join_store(int absent_rank) {
  if (rank() == absent_rank) sleep_forever();
  auto secret = chorus::Secret::from_env();
  auto at = chorus::net::Endpoint::parse(var("CHORUS_STORE_ADDR"));
  chorus::TcpStoreClient client(at.host, at.port, *secret, std::chrono::seconds(5));
  client.set("chorus/joined/" + var("CHORUS_RESTART_COUNT") + "/" + std::to_string(rank()), "1");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  std::string arg = argc > 2 ? argv[2] : "";
  if (mode == "env") {
    print_env();
  } else if (mode == "exit") {
    return std::atoi(arg.c_str());
  } else if (mode == "crash") {
    if (rank() == std::atoi(arg.c_str())) ::raise(SIGSEGV);
    sleep_forever();
  } else if (mode == "lines") {
    print_lines(std::atoi(arg.c_str()));
  } else if (mode == "sleep" || mode == "stubborn") {
    if (mode == "stubborn") ::signal(SIGTERM, SIG_IGN);
    write_pid(arg);
    sleep_forever();
  } else if (mode == "join") {
    return join_store(std::atoi(arg.c_str()));
  } else if (mode == "flaky") {
    if (var("CHORUS_RESTART_COUNT") == "0" && rank() == 1) return 5;
    std::printf("restart=%s\n", var("CHORUS_RESTART_COUNT").c_str());
  } else {
    std::fprintf(stderr, "fake_worker: unknown mode '%s'\n", mode.c_str());
    return 64;
  }
  return 0;
}
