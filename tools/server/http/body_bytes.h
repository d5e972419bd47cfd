// The bytes of a request body as the HTTP layer receives them: one anonymous memory mapping that
// grows with mremap, so growing never copies and never holds a second copy (a std::string would
// double its capacity and copy, briefly holding about three times what arrived). Only the pages
// written are resident. Move-only.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace phi4mm::server::http {

class BodyBytes {
 public:
  BodyBytes() = default;
  ~BodyBytes();
  BodyBytes(BodyBytes&& o) noexcept;
  BodyBytes& operator=(BodyBytes&& o) noexcept;
  BodyBytes(const BodyBytes&) = delete;
  BodyBytes& operator=(const BodyBytes&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data_, size_}; }
  operator std::string_view() const { return view(); }  // NOLINT: a body reads as text
  std::string str() const { return std::string(view()); }

  // Appends `n` bytes; false when memory could not be mapped (nothing appended).
  bool Append(const char* p, size_t n);
  // Makes room for `n` bytes in all without moving them later; false when it could not.
  bool Reserve(size_t n);
  // Frees the bytes.
  void Clear();

 private:
  char* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace phi4mm::server::http
