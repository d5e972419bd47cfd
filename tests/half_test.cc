// The bf16/f16 <-> f32 scalar conversions used when reading checkpoints (base/half.h): f16 decoding
// against an independent ldexp reference over all 65536 patterns, round-to-nearest-even at every
// midpoint, overflow, subnormals and NaN, and the bf16 round trip. (Suite name SafetensorsHalf, so
// CI's sanitizer run over Safetensors* keeps covering it.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "phi4mm/base/half.h"

namespace phi4mm {
namespace {


bool IsF16NaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

// Reference value of an f16 bit pattern, computed independently with ldexp.
double F16Reference(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(SafetensorsHalf, F16ToF32ExactAndRoundTripsAllPatterns) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = F16ToF32(h);
    if (IsF16NaN(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      const uint16_t back = F32ToF16(f);
      EXPECT_TRUE(IsF16NaN(back)) << std::hex << i << " -> " << back;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << i;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), F16Reference(h)) << std::hex << i;
    EXPECT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << i;
    EXPECT_EQ(F32ToF16(f), h) << std::hex << i;
  }
}

TEST(SafetensorsHalf, F32ToF16RoundsToNearestEven) {
  // Every midpoint between consecutive finite positive halves (and the values either side of it).
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = F16ToF32(h), hi = F16ToF32(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) / 2;  // exact: halves have 11 significant bits
    const uint16_t even = (h & 1u) ? static_cast<uint16_t>(h + 1) : h;
    ASSERT_EQ(F32ToF16(mid), even) << "midpoint above " << std::hex << h;
    ASSERT_EQ(F32ToF16(-mid), even | 0x8000u) << "negative midpoint above " << std::hex << h;
    ASSERT_EQ(F32ToF16(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(F32ToF16(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
  }
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bffu);
  EXPECT_EQ(F32ToF16(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00u);  // the midpoint to the next binade rounds to even = inf
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00u);
  EXPECT_EQ(F32ToF16(-1e10f), 0xfc00u);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0u);  // half the smallest subnormal: ties to even (0)
  EXPECT_EQ(F32ToF16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 1u);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -30)), 0u);
  EXPECT_EQ(F32ToF16(-std::ldexp(1.0f, -30)), 0x8000u);
  EXPECT_TRUE(IsF16NaN(F32ToF16(std::nanf(""))));
}

TEST(SafetensorsHalf, Bf16RoundTripAndTiesToEven) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = Bf16ToF32(h);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    ASSERT_EQ(bits, i << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(f)))) << std::hex << i;
    } else {
      EXPECT_EQ(F32ToBf16(f), h) << std::hex << i;
    }
  }
  auto from_bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  EXPECT_EQ(F32ToBf16(from_bits(0x3f808000u)), 0x3f80u);  // tie, even below
  EXPECT_EQ(F32ToBf16(from_bits(0x3f818000u)), 0x3f82u);  // tie, even above
  EXPECT_EQ(F32ToBf16(from_bits(0x3f808001u)), 0x3f81u);  // just above the tie
  EXPECT_EQ(F32ToBf16(from_bits(0x3f817fffu)), 0x3f81u);  // just below the tie
  EXPECT_EQ(F32ToBf16(from_bits(0xbf808000u)), 0xbf80u);  // negative tie
  EXPECT_EQ(F32ToBf16(from_bits(0x7f7f8000u)), 0x7f80u);  // tie past the largest finite -> inf
  EXPECT_EQ(F32ToBf16(from_bits(0x00008000u)), 0x0000u);  // subnormal tie
  EXPECT_EQ(F32ToBf16(from_bits(0x00018000u)), 0x0002u);
  // NaNs whose payload sits only in the low 16 bits must stay NaN, not become infinity.
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(from_bits(0xff800001u)))));
}

}  // namespace
}  // namespace phi4mm
