// Shared by the Audio* tests: reads tests/fixtures/audio/manifest.json (written by
// tools/reference/make_audio_fixtures.py) and the reference feature files it names.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace phi4mm::test {

inline std::string AudioFixture(const std::string& rel) { return FixturePath("audio/" + rel); }

inline nlohmann::json AudioManifest() {
  std::ifstream in(AudioFixture("manifest.json"));
  return nlohmann::json::parse(in);
}

// float32 little-endian values of a fixture file.
inline std::vector<float> ReadF32(const std::string& rel) {
  std::ifstream in(AudioFixture(rel), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

inline uint64_t Fnv1a64(const std::vector<float>& v) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace phi4mm::test
