// The ISA dispatch point (kernels/isa.h): which ISA a PHI4MM_ISA value selects on a given CPU, the
// refusals (a table the CPU lacks, one the build lacks, a misspelling) as clear errors, and that
// every family's table for each ISA this machine offers is the one the dispatch point names. The
// per-family numeric checks against scalar loop over AvailableIsas() in their own tests.
#include <gtest/gtest.h>

#include <string>

#include "phi4mm/kernels/isa.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {
namespace {

CpuFeatures X86(bool avx2, bool avx512) {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = avx2;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = avx512;
  return f;
}

CpuFeatures Arm(bool dot) {
  CpuFeatures f;
  f.neon = true;
  f.neon_dot = dot;
  return f;
}

bool Contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

TEST(Isa, NamesRoundTrip) {
  for (Isa isa : kAllIsas) {
    if (!IsaBuilt(isa)) continue;
    CpuFeatures all = X86(true, true);
    all.neon = all.neon_dot = true;
    auto r = ResolveIsa(IsaName(isa), all);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, isa);
  }
}

TEST(Isa, UnsetPicksTheBestTheCpuRuns) {
  EXPECT_EQ(*ResolveIsa("", CpuFeatures{}), Isa::kScalar);
  if (IsaBuilt(Isa::kAvx2)) {
    EXPECT_EQ(*ResolveIsa("", X86(true, false)), Isa::kAvx2);
    EXPECT_EQ(*ResolveIsa("", X86(true, true)), Isa::kAvx512);
    // AVX-512 without AVX2+FMA+F16C is not enough for the AVX-512 table (it reuses AVX2 entries).
    EXPECT_EQ(*ResolveIsa("", X86(false, true)), Isa::kScalar);
  }
  if (IsaBuilt(Isa::kNeon)) {
    EXPECT_EQ(*ResolveIsa("", Arm(false)), Isa::kNeon);
    EXPECT_EQ(*ResolveIsa("", Arm(true)), Isa::kNeonDot);
  }
}

TEST(Isa, OverrideTheCpuLacksIsRefusedClearly) {
  for (Isa isa : kAllIsas) {
    if (isa == Isa::kScalar || !IsaBuilt(isa)) continue;
    auto r = ResolveIsa(IsaName(isa), CpuFeatures{});
    ASSERT_FALSE(r.ok()) << IsaName(isa);
    EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
    EXPECT_TRUE(Contains(r.status().message(), std::string("PHI4MM_ISA=") + IsaName(isa))) << r.status().message();
    EXPECT_TRUE(Contains(r.status().message(), "this CPU lacks")) << r.status().message();
  }
  if (IsaBuilt(Isa::kAvx512)) {
    EXPECT_FALSE(ResolveIsa("avx512", X86(true, false)).ok());
  }
  if (IsaBuilt(Isa::kNeonDot)) {
    EXPECT_FALSE(ResolveIsa("neondot", Arm(false)).ok());
  }
  // Scalar is always there.
  EXPECT_EQ(*ResolveIsa("scalar", CpuFeatures{}), Isa::kScalar);
}

TEST(Isa, OverrideTheBuildLacksIsRefusedClearly) {
  int lacking = 0;
  for (Isa isa : kAllIsas) {
    if (IsaBuilt(isa)) continue;
    ++lacking;
    CpuFeatures all = X86(true, true);
    all.neon = all.neon_dot = true;
    auto r = ResolveIsa(IsaName(isa), all);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(Contains(r.status().message(), "this build of phi4mm has no")) << r.status().message();
  }
  // Every build compiles one architecture's tables at most, so another's are always missing.
  EXPECT_GE(lacking, 2);
}

TEST(Isa, MisspelledOverrideNamesTheChoices) {
  auto r = ResolveIsa("AVX2 ", X86(true, true));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status().message(), "scalar, avx2, avx512, neon, neondot")) << r.status().message();
}

TEST(Isa, AvailableTablesAreTheDispatchPointsList) {
  const std::vector<Isa> isas = AvailableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  const std::vector<const MatMulKernels*> tables = AvailableKernels();
  ASSERT_EQ(tables.size(), isas.size());
  for (size_t i = 0; i < isas.size(); ++i) EXPECT_STREQ(tables[i]->name, IsaName(isas[i]));
  // This process runs with PHI4MM_ISA as the test runner set it (unset: the best; CI also runs the
  // suite with PHI4MM_ISA=scalar): the active ISA is one of the available ones, its table active.
  ASSERT_TRUE(IsaOverrideStatus().ok()) << IsaOverrideStatus().ToString();
  bool found = false;
  for (Isa isa : isas) found = found || isa == ActiveIsa();
  EXPECT_TRUE(found);
  EXPECT_STREQ(ActiveKernels().name, IsaName(ActiveIsa()));
}

}  // namespace
}  // namespace phi4mm
