// NaViT bucketed position ids, with torch's float32 arange/bucketize arithmetic reproduced.
#include "phi4mm/models/vision_position.h"

#include <cstddef>

namespace phi4mm {

std::vector<int64_t> NavitBucketCoords(int64_t valid, int64_t P) {
  std::vector<int64_t> out;
  if (valid <= 0 || P <= 0) return out;
  // boundaries = torch.arange(1/P, 1.0, 1/P): count ceil((1 - 1/P) / (1/P)) in double, values
  // start + step*i in double rounded to float32.
  const double bstep = 1.0 / static_cast<double>(P);
  std::vector<float> bounds;
  for (int64_t i = 0; bstep + bstep * static_cast<double>(i) < 1.0; ++i)
    bounds.push_back(static_cast<float>(bstep + bstep * static_cast<double>(i)));
  // 1 / valid on an int64 tensor gives a float32 tensor; arange(0, 1 - 1e-6, step) evaluates
  // step*k in double and rounds each value to float32 (count ceil((1-1e-6)/step) = valid).
  const float step = 1.0f / static_cast<float>(valid);
  for (int64_t k = 0; static_cast<double>(step) * static_cast<double>(k) < 1.0 - 1e-6; ++k) {
    const float f = static_cast<float>(static_cast<double>(step) * static_cast<double>(k));
    int64_t bucket = 0;  // bucketize(right=True): number of boundaries <= f
    for (float b : bounds) bucket += (b <= f) ? 1 : 0;
    out.push_back(bucket);
  }
  return out;
}

std::vector<int64_t> NavitPositionIds(int64_t rows, int64_t cols, int64_t P) {
  std::vector<int64_t> ids(static_cast<size_t>(P * P), 0);
  const std::vector<int64_t> bh = NavitBucketCoords(rows, P), bw = NavitBucketCoords(cols, P);
  for (int64_t r = 0; r < rows && r < static_cast<int64_t>(bh.size()); ++r)
    for (int64_t c = 0; c < cols && c < static_cast<int64_t>(bw.size()); ++c) ids[r * P + c] = bh[r] * P + bw[c];
  return ids;
}

}  // namespace phi4mm
