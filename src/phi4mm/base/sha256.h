// SHA-256 (FIPS 180-4), written here for content keys: the engine's encoder-output and prefix
// caches key decoded pixels and audio samples by their digest, so that a request can only ever
// reuse features computed from exactly the same media (a 64-bit hash could be collided on purpose
// by one client to read another's image features).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace phi4mm {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t n);
  template <typename T>
  void UpdateValue(const T& v) {
    Update(&v, sizeof(T));
  }
  std::array<uint8_t, 32> Finish();

 private:
  void Block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

using Digest = std::array<uint8_t, 32>;
std::string DigestHex(const Digest& d);

}  // namespace phi4mm
