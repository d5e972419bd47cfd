// The ISA dispatch point (kernels/isa.h): which ISA a PHI4MM_ISA value selects on a given CPU, the
// refusals (a table the CPU lacks, one the build lacks, a misspelling) as clear errors, and that
// every family's table for each ISA this machine offers is the one the dispatch point names. The
// per-family numeric checks against scalar loop over AvailableIsas() in their own tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "phi4mm/kernels/isa.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm {
namespace {

CpuFeatures X86(bool avx2, bool avx512, bool avx_vnni = false) {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.bmi2 = avx2;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = avx512;
  f.avx_vnni = avx_vnni;
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
    CpuFeatures all = X86(true, true, true);
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
    // AVX-VNNI without AVX-512 (Intel client cores since Alder Lake): the avxvnni table.
    EXPECT_EQ(*ResolveIsa("", X86(true, false, true)), Isa::kAvxVnni);
    EXPECT_EQ(*ResolveIsa("", X86(true, true, true)), Isa::kAvx512);
    EXPECT_EQ(*ResolveIsa("", X86(false, false, true)), Isa::kScalar);
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
    EXPECT_FALSE(ResolveIsa("avx512", X86(true, false, true)).ok());
    EXPECT_FALSE(ResolveIsa("avxvnni", X86(true, false)).ok());
    // The avxvnni table runs on AVX-VNNI, and (its EVEX copy) on AVX-512 VNNI.
    EXPECT_EQ(*ResolveIsa("avxvnni", X86(true, false, true)), Isa::kAvxVnni);
    EXPECT_EQ(*ResolveIsa("avxvnni", X86(true, true)), Isa::kAvxVnni);
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
    CpuFeatures all = X86(true, true, true);
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
  EXPECT_TRUE(Contains(r.status().message(), "scalar, avx2, avxvnni, avx512, neon, neondot")) << r.status().message();
}

TEST(Isa, AvailableTablesAreTheDispatchPointsList) {
  const std::vector<Isa> isas = AvailableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  // Every ISA's table is among the available ones, and every available table belongs to an ISA
  // (its name starts with the ISA's: avx512 has two, "avx512" and "avx512zmm"; avxvnni has
  // "avxvnni" and "avxvnni-evex", the encodings this CPU runs).
  const std::vector<const MatMulKernels*> tables = AvailableKernels();
  for (Isa isa : isas) EXPECT_NE(std::find(tables.begin(), tables.end(), &KernelsFor(isa)), tables.end()) << IsaName(isa);
  for (const MatMulKernels* t : tables) {
    bool owned = false;
    for (Isa isa : isas) owned = owned || std::string_view(t->name).starts_with(IsaName(isa));
    EXPECT_TRUE(owned) << t->name;
  }
  EXPECT_EQ(tables.front(), &ScalarKernels());
  // This process runs with PHI4MM_ISA as the test runner set it (unset: the best; CI also runs the
  // suite with PHI4MM_ISA=scalar): the active ISA is one of the available ones, its table active.
  ASSERT_TRUE(IsaOverrideStatus().ok()) << IsaOverrideStatus().ToString();
  bool found = false;
  for (Isa isa : isas) found = found || isa == ActiveIsa();
  EXPECT_TRUE(found);
  EXPECT_EQ(&ActiveKernels(), &KernelsFor(ActiveIsa()));
  EXPECT_TRUE(std::string_view(ActiveKernels().name).starts_with(IsaName(ActiveIsa()))) << ActiveKernels().name;
}

TEST(Isa, AvxVnniEncodingFollowsTheCpu) {
  const AvxVnniEncodings alder_lake = AvxVnniRunnable(X86(true, false, true));
  EXPECT_TRUE(alder_lake.vex);
  EXPECT_FALSE(alder_lake.evex);
  const AvxVnniEncodings zen4 = AvxVnniRunnable(X86(true, true));
  EXPECT_FALSE(zen4.vex);
  EXPECT_TRUE(zen4.evex);
  const AvxVnniEncodings sapphire_rapids = AvxVnniRunnable(X86(true, true, true));
  EXPECT_TRUE(sapphire_rapids.vex);
  EXPECT_TRUE(sapphire_rapids.evex);
  const AvxVnniEncodings haswell = AvxVnniRunnable(X86(true, false));
  EXPECT_FALSE(haswell.vex || haswell.evex);
  if (IsaBuilt(Isa::kAvxVnni) && IsaRuns(Isa::kAvxVnni, GetCpuFeatures())) {
    const bool vex = AvxVnniRunnable(GetCpuFeatures()).vex;
    EXPECT_EQ(AvxVnniEncoding(), vex ? VnniEncoding::kVex : VnniEncoding::kEvex);
    EXPECT_STREQ(KernelsFor(Isa::kAvxVnni).name, vex ? "avxvnni" : "avxvnni-evex");
  }
}

TEST(Isa, IntegerTileIsasRunTheirBaseFloatKernels) {
  EXPECT_EQ(FloatKernelIsa(Isa::kScalar), Isa::kScalar);
  EXPECT_EQ(FloatKernelIsa(Isa::kAvx2), Isa::kAvx2);
  EXPECT_EQ(FloatKernelIsa(Isa::kAvxVnni), Isa::kAvx2);
  EXPECT_EQ(FloatKernelIsa(Isa::kAvx512), Isa::kAvx2);
  EXPECT_EQ(FloatKernelIsa(Isa::kNeon), Isa::kNeon);
  EXPECT_EQ(FloatKernelIsa(Isa::kNeonDot), Isa::kNeon);
}

TEST(Isa, Avx512TileWidthFollowsTheCpuUnlessOverridden) {
  CpuFeatures intel = X86(true, true), zen5 = X86(true, true);
  zen5.avx512_zmm_full_rate = true;
  EXPECT_EQ(*ResolveAvx512Tiles("", intel), Avx512Tiles::kYmm);
  EXPECT_EQ(*ResolveAvx512Tiles("", zen5), Avx512Tiles::kZmm);
  EXPECT_EQ(*ResolveAvx512Tiles("zmm", intel), Avx512Tiles::kZmm);
  EXPECT_EQ(*ResolveAvx512Tiles("ymm", zen5), Avx512Tiles::kYmm);
  auto bad = ResolveAvx512Tiles("512", zen5);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), "PHI4MM_AVX512_TILES=512")) << bad.status().message();
  EXPECT_TRUE(Contains(bad.status().message(), "ymm or zmm")) << bad.status().message();
}

}  // namespace
}  // namespace phi4mm
