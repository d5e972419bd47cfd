// IEEE half <-> float, bit-exact, including subnormals, infinities and NaN.
#include "phi4mm/base/half.h"

namespace phi4mm {

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t absb = bits & 0x7fffffffu;
  if (absb > 0x7f800000u) return sign | 0x7e00u;        // NaN
  if (absb >= 0x477ff000u) return sign | 0x7c00u;       // overflow -> inf (rounds up past 65504)
  if (absb < 0x38800000u) {                             // subnormal or zero in half
    if (absb < 0x33000000u) return sign;                // rounds to zero
    const uint32_t exp = absb >> 23;
    const uint32_t mant = (absb & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;                   // 14..24
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = mant >> shift;
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = absb - 0x38000000u;  // rebias exponent
  r += 0xfffu + ((r >> 13) & 1u);   // round to nearest even
  return static_cast<uint16_t>(sign | (r >> 13));
}

}  // namespace phi4mm
