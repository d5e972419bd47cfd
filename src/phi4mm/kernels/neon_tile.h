// The piece shared by the NEON kernel files (quant_kernels_neon.cc, quant_kernels_neondot.cc) beside
// tile_common.h: the dispatch of a tile to its compile-time R x N shape. Everything here has
// internal linkage (an anonymous namespace), so each file compiled with its own -march flags keeps
// its own copy and the linker can never hand the dot-product file's version to baseline code.
// Include only from src/phi4mm/kernels/*_neon*.cc.
#pragma once

#include <algorithm>

#include "phi4mm/kernels/quant_kernels.h"
#include "phi4mm/kernels/tile_common.h"

namespace phi4mm::neon {
namespace {


// Instantiates Impl::Run<R, N> for every nr, na in [1, 4]; more activation rows (up to
// kMaxTileActs) run as successive tiles of at most 4.
template <class Impl>
void Tile(const TileArgs& t) {
  static_assert(kMaxTileRows == 4, "extend the switch with kMaxTileRows");
  if (t.na > 4) {
    TileArgs part = t;
    for (int i = 0; i < t.na; i += 4) {
      part.na = std::min(4, t.na - i);
      part.a = t.a + static_cast<size_t>(i) * t.a_stride;
      part.y = t.y + i * t.ldy;
      part.prefetch = t.prefetch && i == 0;
      Tile<Impl>(part);
    }
    return;
  }
  switch ((t.nr - 1) * 4 + (t.na - 1)) {
    case 0: return Impl::template Run<1, 1>(t);
    case 1: return Impl::template Run<1, 2>(t);
    case 2: return Impl::template Run<1, 3>(t);
    case 3: return Impl::template Run<1, 4>(t);
    case 4: return Impl::template Run<2, 1>(t);
    case 5: return Impl::template Run<2, 2>(t);
    case 6: return Impl::template Run<2, 3>(t);
    case 7: return Impl::template Run<2, 4>(t);
    case 8: return Impl::template Run<3, 1>(t);
    case 9: return Impl::template Run<3, 2>(t);
    case 10: return Impl::template Run<3, 3>(t);
    case 11: return Impl::template Run<3, 4>(t);
    case 12: return Impl::template Run<4, 1>(t);
    case 13: return Impl::template Run<4, 2>(t);
    case 14: return Impl::template Run<4, 3>(t);
    default: return Impl::template Run<4, 4>(t);
  }
}

}  // namespace
}  // namespace phi4mm::neon
