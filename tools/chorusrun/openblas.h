// OpenBLAS's core type for the workers chorusrun starts on this host.
//
// Debian's OpenBLAS (0.3.21, built for every x86-64 core and choosing at load time) does not
// recognise some recent CPUs and then runs its generic Prescott kernels (SSE3): libtorch's
// matrix products are about 2.5x slower than with the AVX-512 or AVX2 kernels the CPU could
// run (docs/torch.md). OPENBLAS_CORETYPE overrides the choice. chorusrun asks the OpenBLAS
// library the workers will load which core it picked, compares that with the CPU's flags,
// and when OpenBLAS fell back below what the CPU can do, sets OPENBLAS_CORETYPE for the
// workers it starts here — never when the user set it. See docs/launcher.md.
#pragma once

#include <optional>
#include <string>

namespace chorus::run {

// What the CPU can run, from /proc/cpuinfo's first "flags" line.
struct CpuFeatures {
  bool avx2_fma = false;  // avx2 and fma: OpenBLAS's Haswell kernels
  bool avx512 = false;    // avx512f, bw, vl, dq and cd: its SkylakeX kernels
};

// Parses the text of /proc/cpuinfo; no flags line gives no features.
CpuFeatures parse_cpu_features(const std::string& cpuinfo);

// Whether `core` (as openblas_get_corename() names it) is one of OpenBLAS's cores without
// AVX2 kernels, which it falls back to on CPUs it does not know (Prescott for most).
bool is_generic_openblas_core(const std::string& core);

// The decision, without side effects. `core` is "" when the workers load no OpenBLAS;
// `user_value` is OPENBLAS_CORETYPE from the launcher's environment (nullptr when unset,
// and a set value — even empty — is the user's choice). Returns the value to set, if any:
// "SkylakeX" on a generic core with AVX-512, else "Haswell" with AVX2 and FMA.
std::optional<std::string> choose_openblas_coretype(const CpuFeatures& cpu, const std::string& core,
                                                    const char* user_value);

// The core the workers' OpenBLAS would pick: loads libblas.so.3 (what libtorch links; the
// alternatives system points it at OpenBLAS or another BLAS), else libopenblas.so.0, in a
// forked child with one OpenBLAS thread, and asks openblas_get_corename(). "" when there is
// no OpenBLAS or the probe fails or takes longer than 5 s. Call before starting threads.
std::string probe_openblas_core();

// Applies the decision for this host: unless OPENBLAS_CORETYPE is set, probes, and when a
// value is chosen sets it in chorusrun's own environment (which local ranks and a local
// mpirun inherit; remote ranks do not get it) and says so in one line. With `verbose`,
// also says what was found when nothing is set.
void tune_openblas_for_local_workers(bool verbose);

}  // namespace chorus::run
