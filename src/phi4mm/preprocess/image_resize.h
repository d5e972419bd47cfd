// Private resampling kernels of the image processor, each a reimplementation of the exact
// arithmetic of the reference: Pillow's `Image.resize(..., BILINEAR)` on 8-bit RGB (the fixed-point
// separable resampler of Pillow's Resample.c, used by the original Phi4MMImageProcessor through
// torchvision's PIL backend), and torch's `F.interpolate(mode='bicubic', align_corners=False)` on a
// float32 CHW tensor (the global view). Not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

namespace phi4mm::image_internal {

// Pillow BILINEAR resize of packed RGB8 [in_h, in_w, 3] to [out_h, out_w, 3]. All sizes >= 1.
// A dimension whose size does not change is not resampled (Pillow skips that pass); equal sizes give
// a copy.
std::vector<uint8_t> ResizeBilinearPil(const std::vector<uint8_t>& rgb, int64_t in_w, int64_t in_h,
                                       int64_t out_w, int64_t out_h);

// torch.nn.functional.interpolate(x[None], size=(out_h, out_w), mode='bicubic',
// align_corners=False) for x float32 [channels, in_h, in_w] -> [channels, out_h, out_w], no
// antialias and no clamping, float32 arithmetic in torch's order of operations (with the fused
// multiply-adds of its AVX2 build).
std::vector<float> ResizeBicubicTorch(const float* chw, int64_t channels, int64_t in_h, int64_t in_w,
                                      int64_t out_h, int64_t out_w);

}  // namespace phi4mm::image_internal
