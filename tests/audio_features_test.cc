// Log-mel parity tests: every fixture clip's features against the port of Microsoft's original
// Phi4MMAudioFeatureExtractor in tools/reference/make_audio_fixtures.py (fp32, 1e-4), the token
// count on every clip (incl. the real LibriSpeech clip's 114 tokens and the 45 s clip), the mel
// bank cell where the original and transformers differ, the 8 kHz "fillzero" path and resampling.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "audio_fixture_util.h"
#include "phi4mm/preprocess/audio.h"
#include "phi4mm/preprocess/audio_features.h"
#include "phi4mm/preprocess/mel.h"
#include "phi4mm/preprocess/resample.h"

namespace phi4mm {
namespace {

using test::AudioFixture;

TEST(AudioFeatures, EveryClipMatchesTheOriginalExtractor) {
  const auto manifest = test::AudioManifest();
  for (const auto& e : manifest["clips"]) {
    const std::string file = e["file"];
    SCOPED_TRACE(file);
    auto clip = DecodeAudioFile(AudioFixture(file));
    ASSERT_TRUE(clip.ok()) << clip.status().ToString();
    auto feats = ComputeAudioFeatures(*clip);
    ASSERT_TRUE(feats.ok()) << feats.status().ToString();
    ASSERT_EQ(feats->frames, e["frames"].get<int64_t>());
    ASSERT_EQ(feats->num_mel, 80);
    ASSERT_EQ(static_cast<int64_t>(feats->log_mel.size()), feats->frames * 80);
    EXPECT_EQ(feats->num_tokens, e["num_tokens"].get<int64_t>());
    const int64_t stride = e["frame_stride"];
    const std::vector<float> ref = test::ReadF32(e["features"].get<std::string>());
    const int64_t stored = (feats->frames + stride - 1) / stride;
    ASSERT_EQ(static_cast<int64_t>(ref.size()), stored * 80);
    double max_err = 0.0;
    for (int64_t s = 0; s < stored; ++s) {
      for (int64_t m = 0; m < 80; ++m) {
        const double got = feats->log_mel[static_cast<size_t>(s * stride * 80 + m)];
        const double want = ref[static_cast<size_t>(s * 80 + m)];
        max_err = std::max(max_err, std::abs(got - want));
      }
    }
    EXPECT_LE(max_err, 1e-4);
    std::printf("  %-28s %6lld frames %4lld tokens  max|err| %.3g\n", file.c_str(),
                static_cast<long long>(feats->frames), static_cast<long long>(feats->num_tokens), max_err);
  }
}

TEST(AudioFeatures, RealLibriSpeechClipTakes114Tokens) {
  auto clip = DecodeAudioFile(AudioFixture("real_652-129742-0006.flac"));
  ASSERT_TRUE(clip.ok()) << clip.status().ToString();
  EXPECT_EQ(clip->sample_rate, 16000);
  EXPECT_EQ(clip->samples.size(), 145840u);
  auto feats = ComputeAudioFeatures(*clip);
  ASSERT_TRUE(feats.ok());
  EXPECT_EQ(feats->frames, 910);  // (145840 - 400) // 160 + 1
  EXPECT_EQ(feats->num_tokens, 114);
}

TEST(AudioFeatures, LongClipIsProcessedWhole) {
  auto clip = DecodeAudioFile(AudioFixture("long_45s_16k.flac"));
  ASSERT_TRUE(clip.ok()) << clip.status().ToString();
  ASSERT_EQ(clip->samples.size(), 45u * 16000u);
  auto feats = ComputeAudioFeatures(*clip);
  ASSERT_TRUE(feats.ok());
  EXPECT_EQ(feats->frames, 4498);    // (720000 - 400) // 160 + 1
  EXPECT_EQ(feats->num_tokens, 563);  // ceil(4498 / 8)
  for (float v : feats->log_mel) ASSERT_TRUE(std::isfinite(v) && v >= 0.0f);
}

TEST(AudioFeatures, TokenCountIsCeilOfCeil) {
  AudioClip c;
  c.sample_rate = 16000;
  // frames = (n - 400) / 160 + 1
  const struct {
    int64_t frames, compression, downsample, tokens;
  } cases[] = {{1, 8, 1, 1}, {8, 8, 1, 1}, {9, 8, 1, 2}, {16, 8, 1, 2}, {98, 8, 1, 13},
               {17, 8, 2, 2}, {25, 8, 2, 2}, {33, 8, 2, 3}, {2998, 8, 1, 375}, {3998, 8, 1, 500}};
  for (const auto& tc : cases) {
    c.samples.assign(static_cast<size_t>(400 + 160 * (tc.frames - 1) + 159), 0.01f);
    AudioFeatureOptions o;
    o.compression_rate = tc.compression;
    o.downsample_rate = tc.downsample;
    auto f = ComputeAudioFeatures(c, o);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->frames, tc.frames);
    EXPECT_EQ(f->num_tokens, tc.tokens) << tc.frames << " frames, /" << tc.compression << " /" << tc.downsample;
  }
}

TEST(AudioFeatures, MelBankFollowsTheOriginalNotTransformers) {
  const MelBank& mel = Phi4MMMelBank();
  ASSERT_EQ(mel.num_bins, 257);
  ASSERT_EQ(mel.num_mel, 80);
  // speechlib_mel fills bins [1, 245] only; transformers' mel_filter_bank has ~0.009719 at
  // (bin 246, filter 79). Bin 0 and bins >= 246 are empty in the original.
  EXPECT_EQ(mel.weights[246 * 80 + 79], 0.0f);
  for (int64_t m = 0; m < 80; ++m) {
    EXPECT_EQ(mel.weights[static_cast<size_t>(m)], 0.0f);
    for (int64_t k = 246; k < 257; ++k) EXPECT_EQ(mel.weights[static_cast<size_t>(k * 80 + m)], 0.0f);
  }
  EXPECT_GT(mel.weights[245 * 80 + 79], 0.0f);
  // Every filter has some weight; each bin's two neighbouring triangles sum to 1 in the interior.
  for (int64_t m = 0; m < 80; ++m) {
    double s = 0.0;
    for (int64_t k = 0; k < 257; ++k) s += mel.weights[static_cast<size_t>(k * 80 + m)];
    EXPECT_GT(s, 0.0) << m;
  }
  for (int64_t k = 10; k < 237; ++k) {  // up to the last filter's centre (~7427 Hz)
    double s = 0.0;
    for (int64_t m = 0; m < 80; ++m) s += mel.weights[static_cast<size_t>(k * 80 + m)];
    EXPECT_NEAR(s, 1.0, 1e-6) << k;
  }
}

TEST(AudioFeatures, EightKiloHertzFillsUpperBandsWithZero) {
  auto clip = DecodeAudioFile(AudioFixture("speech_8k.wav"));
  ASSERT_TRUE(clip.ok());
  auto feats = ComputeAudioFeatures(*clip);
  ASSERT_TRUE(feats.ok());
  // 8 kHz: 200-sample window, 80 hop -> same 10 ms frame rate as 16 kHz.
  EXPECT_EQ(feats->frames, (static_cast<int64_t>(clip->samples.size()) - 200) / 80 + 1);
  // Bins >= 128 (4 kHz and up) are zero, so the mel bands entirely above 4 kHz clamp to log(1) = 0.
  const MelBank& mel = Phi4MMMelBank();
  for (int64_t m = 0; m < 80; ++m) {
    bool below_4k = false;
    for (int64_t k = 0; k < 128; ++k) below_4k |= mel.weights[static_cast<size_t>(k * 80 + m)] != 0.0f;
    if (below_4k) continue;
    for (int64_t t = 0; t < feats->frames; ++t) ASSERT_EQ(feats->log_mel[static_cast<size_t>(t * 80 + m)], 0.0f);
  }
}

TEST(AudioFeatures, ResamplePolyKeepsLengthAndDc) {
  std::vector<float> x(4410, 0.25f);
  auto y = ResamplePoly(x, 16000, 44100);  // gcd 100 -> 160 / 441
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->size(), 1600u);  // ceil(4410 * 160 / 441)
  // Away from the zero-padded edges a constant stays constant (firwin is scaled to unit DC gain).
  for (size_t i = 200; i < 1400; ++i) EXPECT_NEAR((*y)[i], 0.25, 1e-3) << i;
  auto same = ResamplePoly(x, 3, 3);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->size(), x.size());
  EXPECT_FALSE(ResamplePoly(x, 0, 3).ok());
}

}  // namespace
}  // namespace phi4mm
