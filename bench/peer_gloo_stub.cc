// Built when CMake found no Gloo: the gloo peer mode reports that it is not built.
#include "backend.h"

namespace chorus::bench {

std::unique_ptr<Backend> make_gloo_backend(const std::string&, const std::string&) {
  throw NotBuilt("--peer gloo: not built (CMake found no Gloo; install libgloo-dev)");
}

}  // namespace chorus::bench
