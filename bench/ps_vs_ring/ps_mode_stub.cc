// Built when chorus_ps is not available: the ps modes say so (exit status 3).
#include "modes.h"

namespace chorus::bench {

bool ps_modes_built() { return false; }
int run_ps_server(const BenchArgs&) { return 3; }
int run_ps_worker(const BenchArgs&) { return 3; }

}  // namespace chorus::bench
