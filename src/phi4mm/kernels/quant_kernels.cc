// The scalar reference kernel table, and the map from the process's ISA (kernels/isa.h) to its
// table. The scalar tile kernels define the arithmetic the SIMD tables
// must reproduce: exact integer sums per block (Q4_K: per sub-block), then float scaling in block
// order.
#include "phi4mm/kernels/quant_kernels.h"

#include "phi4mm/base/half.h"
#include "phi4mm/kernels/quant.h"
#include "phi4mm/kernels/tile_common.h"

namespace phi4mm {

namespace {

float WeightAt(WeightFormat f, const uint8_t* row, int64_t k) {
  switch (f) {
    case WeightFormat::kF32: return reinterpret_cast<const float*>(row)[k];
    case WeightFormat::kBF16: return Bf16ToF32(reinterpret_cast<const uint16_t*>(row)[k]);
    default: return F16ToF32(reinterpret_cast<const uint16_t*>(row)[k]);
  }
}

template <WeightFormat F>
void FloatTile(const TileArgs& t) {
  for (int r = 0; r < t.nr; ++r) {
    const uint8_t* w = t.w + r * t.w_stride;
    for (int i = 0; i < t.na; ++i) {
      const float* x = reinterpret_cast<const float*>(t.a + i * t.a_stride);
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= t.cols; k += 8)
        for (int l = 0; l < 8; ++l) acc[l] += WeightAt(F, w, k + l) * x[k + l];
      float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (; k < t.cols; ++k) s += WeightAt(F, w, k) * x[k];
      Store(t, r, i, s);
    }
  }
}

void Q8Tile(const TileArgs& t) {
  const int64_t nb = CeilDiv(t.cols, kQ8Block);
  for (int r = 0; r < t.nr; ++r) {
    const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(t.w + r * t.w_stride);
    for (int i = 0; i < t.na; ++i) {
      const BlockA8* a = reinterpret_cast<const BlockA8*>(t.a + i * t.a_stride);
      float s = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int k = 0; k < kQ8Block; ++k) isum += static_cast<int32_t>(w[b].qs[k]) * a[b].qs[k];
        s += F16ToF32(w[b].d) * a[b].d * static_cast<float>(isum);
      }
      Store(t, r, i, s);
    }
  }
}

// Q4_K x A8K: exact integer sums per sub-block, then per block
// s += da * sum_j (sub_j * (d * sc[j]) - (dmin * mn[j]) * bsum[j]), the sub-block terms in order.
void Q4KTile(const TileArgs& t) {
  const int64_t nb = CeilDiv(t.cols, kQ4KBlock);
  for (int r = 0; r < t.nr; ++r) {
    const BlockQ4K* w = reinterpret_cast<const BlockQ4K*>(t.w + r * t.w_stride);
    for (int i = 0; i < t.na; ++i) {
      const BlockA8K* a = reinterpret_cast<const BlockA8K*>(t.a + i * t.a_stride);
      float s = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const float d = F16ToF32(w[b].d), dmin = F16ToF32(w[b].dmin);
        float sb = 0.0f;
        for (int j = 0; j < 8; ++j) {
          int32_t sub = 0;
          for (int k = 0; k < kQ4KSub; ++k) {
            const int p = Q4KPos(j, k);
            sub += Q4KNibble(w[b], p) * a[b].qs[p];
          }
          sb += static_cast<float>(sub) * (d * static_cast<float>(w[b].scales[j])) -
                (dmin * static_cast<float>(w[b].mins[j])) * static_cast<float>(a[b].bsums[j]);
        }
        s += sb * a[b].d;
      }
      Store(t, r, i, s);
    }
  }
}

void QuantA8(const float* x, int64_t cols, void* out) { QuantizeRowA8(x, cols, static_cast<BlockA8*>(out)); }
void QuantA8K(const float* x, int64_t cols, void* out) { QuantizeRowA8K(x, cols, static_cast<BlockA8K*>(out)); }

MatMulKernels MakeScalar() {
  MatMulKernels k;
  k.name = "scalar";
  k.tile[static_cast<int>(WeightFormat::kF32)] = &FloatTile<WeightFormat::kF32>;
  k.tile[static_cast<int>(WeightFormat::kBF16)] = &FloatTile<WeightFormat::kBF16>;
  k.tile[static_cast<int>(WeightFormat::kF16)] = &FloatTile<WeightFormat::kF16>;
  k.tile[static_cast<int>(WeightFormat::kQ8_0)] = &Q8Tile;
  k.tile[static_cast<int>(WeightFormat::kQ4K)] = &Q4KTile;
  for (TileShape& s : k.shape) s = {4, 4, 4, 4, 4};
  k.quantize_a8 = &QuantA8;
  k.quantize_a8k = &QuantA8K;
  return k;
}

}  // namespace

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kF16: return "f16";
    case WeightFormat::kQ8_0: return "q8_0";
    case WeightFormat::kQ4K: return "q4_k";
  }
  return "?";
}

const char* WeightLayoutName(WeightLayout l) {
  switch (l) {
    case WeightLayout::kRows: return "rows";
    case WeightLayout::kQ8Groups: return "q8_groups";
  }
  return "?";
}

size_t quant_internal::PackedA8PairHalvesRowBytes(int64_t cols) {
  return static_cast<size_t>(CeilDiv(CeilDiv(cols, kQ8Block), 4)) * sizeof(A8PairHalves);
}

void quant_internal::PackA8PairHalves(const uint8_t* a8_row, int64_t cols, uint8_t* out) {
  static constexpr int kScaleBlock[8] = {0, 0, 2, 2, 1, 1, 3, 3};
  const BlockA8* b = reinterpret_cast<const BlockA8*>(a8_row);
  auto* o = reinterpret_cast<A8PairHalves*>(out);
  const int64_t nb = CeilDiv(cols, kQ8Block);
  for (int64_t q = 0; 4 * q < nb; ++q) {
    const int64_t b0 = 4 * q;
    for (int l = 0; l < 8; ++l) o[q].d[l] = b0 + kScaleBlock[l] < nb ? b[b0 + kScaleBlock[l]].d : 0.0f;
    for (int k = 0; k < 4; ++k)
      // Block k's halves go to vectors 2 * (k / 2) and 2 * (k / 2) + 1, in lane k % 2.
      for (int h = 0; h < 2; ++h) {
        int8_t* dst = o[q].qs + 32 * (2 * (k / 2) + h) + 16 * (k % 2);
        const int8_t* src = b0 + k < nb ? b[b0 + k].qs + 16 * h : nullptr;
        for (int j = 0; j < 16; ++j) dst[j] = src ? src[j] : 0;
      }
  }
}

size_t quant_internal::PackedA8GroupRowBytes(int64_t cols) {
  return static_cast<size_t>(CeilDiv(CeilDiv(cols, kQ8Block), kQ8Group)) * sizeof(A8Group);
}

void quant_internal::PackA8Groups(const uint8_t* a8_row, int64_t cols, uint8_t* out) {
  const BlockA8* b = reinterpret_cast<const BlockA8*>(a8_row);
  auto* o = reinterpret_cast<A8Group*>(out);
  const int64_t nb = CeilDiv(cols, kQ8Block), ng = CeilDiv(nb, kQ8Group);
  for (int64_t g = 0; g < ng; ++g)
    for (int k = 0; k < kQ8Group; ++k) {
      const int64_t blk = g * kQ8Group + k;
      const bool in = blk < nb;
      int32_t sum = 0;
      for (int p = 0; p < kQ8Block; ++p) {
        const int8_t q = in ? b[blk].qs[p] : 0;
        o[g].qs[(p / 4) * 32 + k * 4 + p % 4] = q;
        sum += q;
      }
      o[g].d[k] = in ? b[blk].d : 0.0f;
      o[g].start[k] = -128 * sum;
    }
}

const MatMulKernels& ScalarKernels() {
  static const MatMulKernels k = MakeScalar();
  return k;
}

const MatMulKernels& KernelsFor(Isa isa) {
  switch (isa) {
#if defined(PHI4MM_BUILD_X86_KERNELS)
    case Isa::kAvx2: return quant_internal::Avx2Kernels();
    case Isa::kAvxVnni:
      return AvxVnniEncoding() == VnniEncoding::kVex ? quant_internal::AvxVnniKernels()
                                                      : quant_internal::AvxVnniEvexKernels();
    case Isa::kAvx512:
      return ActiveAvx512Tiles() == Avx512Tiles::kZmm ? quant_internal::Avx512ZmmKernels()
                                                       : quant_internal::Avx512Kernels();
#endif
#if defined(PHI4MM_BUILD_ARM_KERNELS)
    case Isa::kNeon: return quant_internal::NeonKernels();
    case Isa::kNeonDot: return quant_internal::NeonDotKernels();
#endif
    default: return ScalarKernels();
  }
}

std::vector<const MatMulKernels*> AvailableKernels() {
  std::vector<const MatMulKernels*> v;
  for (Isa isa : AvailableIsas()) {
#if defined(PHI4MM_BUILD_X86_KERNELS)
    if (isa == Isa::kAvxVnni) {
      // Every encoding of the avxvnni table this CPU runs (both on a CPU with AVX-VNNI and AVX-512).
      const AvxVnniEncodings e = AvxVnniRunnable(GetCpuFeatures());
      if (e.vex) v.push_back(&quant_internal::AvxVnniKernels());
      if (e.evex) v.push_back(&quant_internal::AvxVnniEvexKernels());
      continue;
    }
    if (isa == Isa::kAvx512) {
      v.push_back(&quant_internal::Avx512Kernels());
      v.push_back(&quant_internal::Avx512ZmmKernels());
      continue;
    }
#endif
    v.push_back(&KernelsFor(isa));
  }
  return v;
}

const MatMulKernels& ActiveKernels() {
  static const MatMulKernels* const active = &KernelsFor(ActiveIsa());
  return *active;
}

}  // namespace phi4mm
