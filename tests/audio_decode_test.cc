// Audio decoding tests: every fixture format (WAV 8/16/24/32-bit PCM and float, FLAC, OGG/Vorbis,
// MP3, stereo, 8-48 kHz) decodes to the float32 samples soundfile.read gives the reference (bit for
// bit), bytes and files decode alike, and every bad input fails with a message naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "audio_fixture_util.h"
#include "phi4mm/preprocess/audio.h"
#include "phi4mm/preprocess/audio_features.h"

namespace phi4mm {
namespace {

using test::AudioFixture;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

TEST(AudioDecode, EveryClipMatchesSoundfileBitForBit) {
  const auto manifest = test::AudioManifest();
  ASSERT_GE(manifest["clips"].size(), 15u);
  for (const auto& e : manifest["clips"]) {
    const std::string file = e["file"];
    SCOPED_TRACE(file);
    auto clip = DecodeAudioFile(AudioFixture(file));
    ASSERT_TRUE(clip.ok()) << clip.status().ToString();
    EXPECT_EQ(clip->sample_rate, e["sample_rate"].get<int64_t>());
    ASSERT_EQ(static_cast<int64_t>(clip->samples.size()), e["num_samples"].get<int64_t>());
    const int64_t stride = e["sample_probe_stride"];
    const auto& probe = e["sample_probe"];
    for (size_t i = 0; i < probe.size(); ++i) {
      ASSERT_EQ(clip->samples[i * static_cast<size_t>(stride)], probe[i].get<float>()) << "probe " << i;
    }
    if (!e["samples_fnv1a64"].is_null()) {
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(test::Fnv1a64(clip->samples)));
      EXPECT_EQ(std::string(hex), e["samples_fnv1a64"].get<std::string>());
    }
    for (float v : clip->samples) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);
  }
}

TEST(AudioDecode, BytesDecodeLikeFiles) {
  for (const char* file : {"speech_16k.flac", "speech_16k_pcm24.wav", "speech_16k.ogg", "speech_16k.mp3",
                           "stereo_16k.wav"}) {
    SCOPED_TRACE(file);
    const std::string bytes = test::ReadFile(AudioFixture(file));
    auto a = DecodeAudioBytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, file);
    auto b = DecodeAudioFile(AudioFixture(file));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(a->sample_rate, b->sample_rate);
    EXPECT_EQ(a->samples, b->samples);
  }
}

TEST(AudioDecode, StereoIsTheChannelMean) {
  auto st = DecodeAudioFile(AudioFixture("stereo_16k.wav"));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  // Left channel is the 16-bit speech clip; right is a 0.3 * sin(2 pi 440 t) tone on the int16 grid.
  auto left = DecodeAudioFile(AudioFixture("speech_16k_pcm16.wav"));
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(st->samples.size(), left->samples.size());
  for (size_t i = 0; i < st->samples.size(); i += 31) {
    const double right = std::round(0.3 * std::sin(2 * 3.141592653589793 * 440.0 * static_cast<double>(i) / 16000.0) * 32768.0) / 32768.0;
    EXPECT_NEAR(st->samples[i], (static_cast<double>(left->samples[i]) + right) / 2.0, 1e-7) << i;
  }
}

// Each bad fixture fails in decoding or, if it decodes (too short, rate), in feature extraction,
// with the manifest's expected phrase in the message.
TEST(AudioDecode, BadFilesGiveClearErrors) {
  const auto manifest = test::AudioManifest();
  ASSERT_GE(manifest["bad"].size(), 12u);
  for (const auto& e : manifest["bad"]) {
    const std::string file = e["file"];
    const std::string expect = e["expect"];
    SCOPED_TRACE(file);
    Status st;
    auto clip = DecodeAudioFile(AudioFixture(file));
    if (!clip.ok()) {
      st = clip.status();
    } else {
      auto feats = ComputeAudioFeatures(*clip);
      ASSERT_FALSE(feats.ok()) << file << " was accepted";
      st = feats.status();
    }
    EXPECT_NE(Lower(st.message()).find(Lower(expect)), std::string::npos) << st.ToString();
    if (!clip.ok()) {
      EXPECT_NE(st.message().find(file), std::string::npos) << "message should name the file: " << st.ToString();
    }
    const std::string bytes = test::ReadFile(AudioFixture(file));
    auto from_bytes = DecodeAudioBytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, file);
    if (!clip.ok()) {
      EXPECT_FALSE(from_bytes.ok());
      EXPECT_EQ(from_bytes.status().code(), clip.status().code()) << from_bytes.status().ToString();
    }
  }
}

TEST(AudioDecode, MissingFileIsNotFound) {
  auto r = DecodeAudioFile(AudioFixture("does_not_exist.wav"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("does_not_exist.wav"), std::string::npos);
}

TEST(AudioDecode, EmptyByteSpanIsRejected) {
  auto r = DecodeAudioBytes({}, "clip");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty"), std::string::npos);
}

TEST(AudioFeatureErrors, BadClipsAreRejected) {
  AudioClip ok;
  ok.sample_rate = 16000;
  ok.samples.assign(16000, 0.1f);
  ASSERT_TRUE(ComputeAudioFeatures(ok).ok());

  auto expect_error = [](const AudioClip& c, const std::string& phrase) {
    auto r = ComputeAudioFeatures(c);
    ASSERT_FALSE(r.ok()) << phrase;
    EXPECT_NE(r.status().message().find(phrase), std::string::npos) << r.status().ToString();
  };
  for (int64_t rate : {int64_t{0}, int64_t{1}, int64_t{7999}, int64_t{10'000'000}, int64_t{-16000}}) {
    AudioClip c = ok;
    c.sample_rate = rate;
    expect_error(c, "sample rate " + std::to_string(rate));
  }
  AudioClip empty = ok;
  empty.samples.clear();
  expect_error(empty, "no samples");
  AudioClip nan = ok;
  nan.samples[500] = std::numeric_limits<float>::quiet_NaN();
  expect_error(nan, "sample 500 is NaN");
  AudioClip inf = ok;
  inf.samples[7] = -std::numeric_limits<float>::infinity();
  expect_error(inf, "sample 7 is infinite");
  AudioClip short16 = ok;
  short16.samples.resize(399);
  expect_error(short16, "shorter than one 25 ms analysis frame (400 samples)");
  AudioClip short8 = ok;
  short8.sample_rate = 8000;
  short8.samples.resize(199);
  expect_error(short8, "shorter than one 25 ms analysis frame (200 samples)");
  AudioClip short48 = ok;
  short48.sample_rate = 48000;
  short48.samples.resize(1000);  // 334 samples at 16 kHz
  expect_error(short48, "shorter than one");
  AudioClip loud = ok;
  loud.samples[100] = 3e30f;
  expect_error(loud, "overflows the float32 spectrum");
  AudioClip above_one = ok;
  above_one.samples[100] = 1.5f;  // float files may exceed [-1, 1] a little; that is accepted
  EXPECT_TRUE(ComputeAudioFeatures(above_one).ok());
  AudioFeatureOptions bad_opts;
  bad_opts.compression_rate = 0;
  auto r = ComputeAudioFeatures(ok, bad_opts);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("compression_rate"), std::string::npos);
}

}  // namespace
}  // namespace phi4mm
