// Image decoding tests: every supported format and variant decodes to the same RGB pixels as
// Pillow's `Image.open(f).convert('RGB')` (fixtures from tools/reference/make_image_fixtures.py;
// exact for lossless formats and WebP, a measured bound for JPEG), and every bad input (empty,
// truncated, corrupt, unsupported, a header declaring 100000x100000 pixels, a missing file) gives
// the right status code and a message naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "phi4mm/preprocess/image.h"
#include "test_util.h"

namespace phi4mm {
namespace {

Result<Image> DecodeFixture(const std::string& name, const ImageDecodeLimits& limits = {}) {
  return DecodeImageFile(test::FixturePath("images/" + name), limits);
}

struct Diff {
  int max = 0;
  double mean = 0;
};
Diff Compare(const Image& a, const Image& b) {
  Diff d;
  double sum = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) {
    const int e = std::abs(int{a.rgb[i]} - int{b.rgb[i]});
    d.max = std::max(d.max, e);
    sum += e;
  }
  d.mean = a.rgb.empty() ? 0 : sum / static_cast<double>(a.rgb.size());
  return d;
}

TEST(ImageDecode, EveryFormatMatchesPillow) {
  std::ifstream f(test::FixturePath("image_processor/cases.json"));
  const nlohmann::json decoded = nlohmann::json::parse(f)["pil_decoded"];
  ASSERT_GE(decoded.size(), 15u);
  for (const auto& [name, pil_png] : decoded.items()) {
    SCOPED_TRACE(name);
    auto got = DecodeFixture(name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto want = DecodeImageFile(test::FixturePath("image_processor/" + pil_png.get<std::string>()));
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ASSERT_EQ(got->width, want->width);
    ASSERT_EQ(got->height, want->height);
    ASSERT_EQ(got->rgb.size(), static_cast<size_t>(got->width * got->height * 3));
    const Diff d = Compare(*got, *want);
    EXPECT_EQ(d.max, 0) << "every format, JPEG included (libjpeg-turbo as Pillow), must decode exactly like Pillow";
  }
}

TEST(ImageDecode, ConversionRulesOfPillow) {
  // RGBA: alpha dropped without compositing (the fixture has alpha 0 in its top-left corner).
  auto rgba = DecodeFixture("rgba_300x200.png");
  ASSERT_TRUE(rgba.ok());
  EXPECT_EQ(rgba->width, 300);
  // 16-bit grayscale: Pillow's I;16 -> RGB clips at 255; value 53*k % 65536 at pixel k.
  auto g16 = DecodeFixture("gray16_40x30.png");
  ASSERT_TRUE(g16.ok()) << g16.status().ToString();
  for (int k : {0, 1, 4, 5, 100}) {
    const int v = std::min(53 * k % 65536, 255);
    EXPECT_EQ(g16->rgb[static_cast<size_t>(3 * k)], v) << k;
    EXPECT_EQ(g16->rgb[static_cast<size_t>(3 * k + 2)], v) << k;
  }
}

TEST(ImageDecode, BytesAndFileAgree) {
  const std::string bytes = test::ReadFile(test::FixturePath("images/gif_100x80.gif"));
  auto a = DecodeImageBytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "gif bytes");
  auto b = DecodeFixture("gif_100x80.gif");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->rgb, b->rgb);
  EXPECT_EQ(a->width, 100);
  EXPECT_EQ(a->height, 80);
}

void ExpectError(const std::string& name, StatusCode code, const std::string& needle) {
  SCOPED_TRACE(name);
  auto r = DecodeFixture(name);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(name), std::string::npos) << "names the file: " << r.status().message();
}

TEST(ImageDecode, BadInputs) {
  ExpectError("bad_empty.png", StatusCode::kDataLoss, "empty (0 bytes)");
  for (const char* f : {"bad_truncated.png", "bad_truncated.jpg", "bad_truncated.gif", "bad_truncated.bmp",
                        "bad_truncated.webp", "bad_truncated.ppm"}) {
    ExpectError(f, StatusCode::kDataLoss, "truncated");
  }
  ExpectError("bad_crc.png", StatusCode::kDataLoss, "CRC mismatch");
  ExpectError("unsupported.tif", StatusCode::kUnsupported, "TIFF is not supported; convert it to PNG or JPEG");
  ExpectError("unsupported.heic", StatusCode::kUnsupported, "HEIF/HEIC");
  ExpectError("unsupported_ascii.ppm", StatusCode::kUnsupported, "ASCII");
  ExpectError("unsupported_maxval.pgm", StatusCode::kUnsupported, "maxval 15");
  ExpectError("unsupported_cmyk.jpg", StatusCode::kUnsupported, "CMYK");
  ExpectError("unknown.bin", StatusCode::kUnsupported, "not a recognised image format");
  auto missing = DecodeFixture("no_such_image.png");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// Headers declaring 100000x100000 pixels (1e10) are refused from the header alone: the files are a
// few dozen bytes, so reaching the decoder would fail differently.
TEST(ImageDecode, HeaderBombsAreRefusedBeforeDecoding) {
  ExpectError("bomb_100000x100000.png", StatusCode::kInvalidArgument, "100000x100000");
  ExpectError("bomb_100000x100000.bmp", StatusCode::kInvalidArgument, "100000x100000");
  ImageDecodeLimits small;
  small.max_pixels = 448 * 448 - 1;
  for (const char* f : {"square_448.png", "pipeline-cat-chonk.jpeg", "webp_lossless_160x120.webp", "gif_100x80.gif",
                        "bmp_130x70.bmp", "ppm_64x48.ppm"}) {
    small.max_pixels = 1000;
    auto r = DecodeFixture(f, small);
    ASSERT_FALSE(r.ok()) << f;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find("limit of 1000 pixels"), std::string::npos) << r.status().message();
  }
  ImageDecodeLimits exact;
  exact.max_pixels = 448 * 448;  // Pillow refuses only sizes strictly above the limit
  EXPECT_TRUE(DecodeFixture("square_448.png", exact).ok());
}

}  // namespace
}  // namespace phi4mm
