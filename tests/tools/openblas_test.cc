// chorusrun's OpenBLAS decision (tools/chorusrun/openblas.h) on made-up CPUs and cores.
#include "openblas.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace chorus::run {
namespace {

const std::string kAvx512 =
    "processor\t: 0\nflags\t\t: fpu sse sse2 ssse3 fma avx avx2 avx512f avx512dq avx512cd "
    "avx512bw avx512vl avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n";
const std::string kAvx2 = "flags\t\t: fpu sse2 fma avx avx2 f16c\n";
const std::string kAvxOnly = "flags\t\t: fpu sse2 avx\n";

TEST(OpenblasCpu, ReadsTheFirstFlagsLine) {
  CpuFeatures a = parse_cpu_features(kAvx512);
  EXPECT_TRUE(a.avx2_fma);
  EXPECT_TRUE(a.avx512);
  CpuFeatures b = parse_cpu_features(kAvx2);
  EXPECT_TRUE(b.avx2_fma);
  EXPECT_FALSE(b.avx512);
  EXPECT_FALSE(parse_cpu_features(kAvxOnly).avx2_fma);
  EXPECT_FALSE(parse_cpu_features("").avx2_fma);
  // avx2 without fma (no Haswell kernels), avx512f alone (not SkylakeX's whole set),
  // and a flag that merely starts like one ("avx2x") count for nothing.
  EXPECT_FALSE(parse_cpu_features("flags : avx2\n").avx2_fma);
  EXPECT_FALSE(parse_cpu_features("flags : avx2 fma avx512f\n").avx512);
  EXPECT_FALSE(parse_cpu_features("flags : avx2x fma\n").avx2_fma);
}

TEST(OpenblasCore, GenericCoresAreThoseWithoutAvx2Kernels) {
  for (const char* core :
       {"Prescott", "prescott", "Core2", "Nehalem", "Sandybridge", "Barcelona"}) {
    EXPECT_TRUE(is_generic_openblas_core(core)) << core;
  }
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids",
                           "Excavator", "SomeFutureCore", ""}) {
    EXPECT_FALSE(is_generic_openblas_core(core)) << core;
  }
}

std::optional<std::string> choose(const std::string& cpuinfo, const std::string& core,
                                  const char* user = nullptr) {
  return choose_openblas_coretype(parse_cpu_features(cpuinfo), core, user);
}

TEST(OpenblasChoice, GenericCoreOnAFastCpuGetsItsKernels) {
  EXPECT_EQ(choose(kAvx512, "Prescott"), "SkylakeX");
  EXPECT_EQ(choose(kAvx2, "Prescott"), "Haswell");
  EXPECT_EQ(choose(kAvx2, "Sandybridge"), "Haswell");
}

TEST(OpenblasChoice, NothingWhenOpenblasKnowsTheCpu) {
  EXPECT_EQ(choose(kAvx512, "Cooperlake"), std::nullopt);  // this project's CI machine
  EXPECT_EQ(choose(kAvx512, "SkylakeX"), std::nullopt);
  EXPECT_EQ(choose(kAvx2, "Zen"), std::nullopt);
  EXPECT_EQ(choose(kAvx512, "SomeFutureCore"), std::nullopt);
}

TEST(OpenblasChoice, NothingWhenTheCpuHasNoAvx2) {
  EXPECT_EQ(choose(kAvxOnly, "Sandybridge"), std::nullopt);
  EXPECT_EQ(choose("", "Prescott"), std::nullopt);
}

TEST(OpenblasChoice, NothingWithoutOpenblas) { EXPECT_EQ(choose(kAvx512, ""), std::nullopt); }

TEST(OpenblasChoice, TheUsersValueWinsEvenEmpty) {
  EXPECT_EQ(choose(kAvx512, "Prescott", "Haswell"), std::nullopt);
  EXPECT_EQ(choose(kAvx512, "Prescott", ""), std::nullopt);
}

}  // namespace
}  // namespace chorus::run
