// The avxvnni kernel table with VEX encoding (compiled with -mavx2 -mfma -mf16c -mavxvnni; only
// reached through the dispatch in quant_kernels.cc when the CPU has AVX-VNNI): the AVX2 table with
// the ymm vpdpbusd tiles of vnni_ymm_tiles.h for Q4_K and Q8_0. It serves the AVX2 CPUs that have
// AVX-VNNI but no AVX-512 (Intel's client cores since Alder Lake), where the AVX2 integer tiles
// spend three instructions (vpsignb or a nibble unpack, vpmaddubsw, vpmaddwd) per 32
// multiply-adds that vpdpbusd does in one. quant_kernels_avx512.cc compiles the same tiles with
// EVEX encoding for AVX-512 CPUs.
#include "phi4mm/kernels/quant_kernels.h"
#include "phi4mm/kernels/vnni_ymm_tiles.h"

namespace phi4mm {

const MatMulKernels& quant_internal::AvxVnniKernels() {
  static const MatMulKernels k = MakeAvxVnniTable("avxvnni");
  return k;
}

}  // namespace phi4mm
