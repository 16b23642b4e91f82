// Built with -DCHORUS_BENCH_WITH_CHORUS=OFF (peer modes only, e.g. while the
// communicator is being written): the chorus mode reports that it is not built.
#include "backend.h"

namespace chorus::bench {

std::unique_ptr<Backend> make_chorus_backend(const ChorusBackendOptions&) {
  throw NotBuilt("chorus mode: not built (configured with CHORUS_BENCH_WITH_CHORUS=OFF)");
}

}  // namespace chorus::bench
