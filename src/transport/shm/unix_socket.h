// Unix-domain stream sockets in the abstract namespace, used to set up shared-memory links:
// the segment's descriptor travels over them (SCM_RIGHTS) and the connection stays open
// for the link's lifetime so that a dead peer is noticed (EOF / POLLHUP) even when it was
// SIGKILLed. Abstract names leave nothing in the file system and are private to a network
// namespace, like the host identity that decides which ranks use shared memory.
// Every socket made here is non-blocking with close-on-exec.
#pragma once

#include <cstddef>
#include <string>

#include "util/deadline.h"
#include "util/net.h"

namespace chorus::transport::unix_socket {

// Listens on a fresh random abstract name; returns the socket and stores the name (without
// the leading NUL, printable) in `name`.
net::Fd listen_abstract(std::string& name);
// Connects to `name` (as returned by listen_abstract). IoError when nobody listens there.
net::Fd connect_abstract(const std::string& name, Deadline deadline);
// Accepts one pending connection on any listening socket (Unix or TCP), or returns an
// invalid Fd when none is pending.
net::Fd try_accept(int listen_fd);

// Sends n bytes, the first of them together with `pass_fd` (when >= 0) as SCM_RIGHTS.
void send_with_fd(int fd, const void* data, size_t n, int pass_fd, Deadline deadline,
                  const char* what);
// Receives exactly n bytes; a descriptor passed with them is returned (owned), else invalid.
net::Fd recv_with_fd(int fd, void* data, size_t n, Deadline deadline, const char* what);

}  // namespace chorus::transport::unix_socket
