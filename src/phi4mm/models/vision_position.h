// NaViT position ids of one crop (reference: Phi4MultimodalVisionEmbeddings.forward, reference-spec
// §3.2): the valid top-left rows x cols of a patch mask are given fractional coordinates
// torch.arange(0, 1 - 1e-6, 1/valid) in float32 and bucketed against torch.arange(1/P, 1, 1/P)
// with bucketize(right=True). Kept apart so tests can check the float rounding exhaustively.
#pragma once

#include <cstdint>
#include <vector>

namespace phi4mm {

// Bucket index in [0, patches_per_side) of each of the `valid` fractional coordinates.
std::vector<int64_t> NavitBucketCoords(int64_t valid, int64_t patches_per_side);

// position ids [P*P] for a crop whose mask [P, P] is a top-left valid rectangle of rows x cols;
// masked positions keep id 0.
std::vector<int64_t> NavitPositionIds(int64_t rows, int64_t cols, int64_t patches_per_side);

}  // namespace phi4mm
