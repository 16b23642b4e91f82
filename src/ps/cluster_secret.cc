// cluster_secret(): CHORUS_SECRET / CHORUS_SECRET_FILE, or for an all-loopback cluster a
// secret shared through a file, as comm/job.cc does for single-host collective jobs
// (a 0700 directory of the user's, a 0600 file). Here no task is special — ps tasks,
// workers and the chief may start in any order — so the first task to arrive creates the
// file: it writes a private temporary file (O_EXCL) and link()s it to the final name.
// link(), unlike rename(), fails when the name exists, so exactly one task's secret wins
// and the file is complete the moment it appears; the others read it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "chorus/error.h"
#include "chorus/ps/cluster.h"
#include "rendezvous/crypto.h"
#include "util/env.h"

namespace chorus::ps {
namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool all_loopback(const ClusterSpec& spec) {
  auto local = [](const std::string& a) { return is_loopback(split_address(a, "cluster").first); };
  if (!local(spec.chief)) return false;
  for (const auto& a : spec.workers) {
    if (!local(a)) return false;
  }
  for (const auto& a : spec.ps) {
    if (!local(a)) return false;
  }
  return true;
}

// One file per chief address: the chief's address names the job on this host.
std::string secret_path(const std::string& chief) {
  std::string name = "ps-secret-";
  for (char c : chief) {
    bool plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 c == '.' || c == '-';
    name += plain ? c : '_';
  }
  return user_private_dir() + "/" + name;
}

Secret shared_secret(const std::string& path) {
  if (::access(path.c_str(), F_OK) == 0) return Secret::from_file(path);
  std::string tmp = path + ".tmp-" + rendezvous::to_hex(rendezvous::random_bytes(8));
  Secret::generate().write_file(tmp);  // O_EXCL | O_NOFOLLOW, mode 0600
  int rc = ::link(tmp.c_str(), path.c_str());
  int err = errno;
  ::unlink(tmp.c_str());
  if (rc != 0 && err != EEXIST) {
    CHORUS_THROW(IoError, "cannot publish the cluster secret at ", path, ": ", std::strerror(err));
  }
  return Secret::from_file(path);  // ours, or the one that won the race
}

}  // namespace

Secret cluster_secret(const ClusterSpec& spec) {
  if (auto secret = Secret::from_env()) return *secret;
  spec.validate();
  CHORUS_CHECK_ARG(all_loopback(spec),
                   "a parameter-server cluster on several hosts needs a secret: set "
                   "CHORUS_SECRET or CHORUS_SECRET_FILE on every task (chorusrun does this)");
  return shared_secret(secret_path(spec.chief));
}

}  // namespace chorus::ps
