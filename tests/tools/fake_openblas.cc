// A stand-in libblas.so.3 for chorusrun's OpenBLAS probe: names the core in
// FAKE_OPENBLAS_CORE, or Prescott (what Debian's OpenBLAS says on a CPU it does not know).
#include <cstdlib>

extern "C" const char* openblas_get_corename() {
  const char* core = std::getenv("FAKE_OPENBLAS_CORE");
  return core ? core : "Prescott";
}
