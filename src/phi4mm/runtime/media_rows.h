// Which media feature row feeds each position of a sequence, kept the same way by sessions and the
// engine: the features of every image and clip of the sequence (null until encoded) and, for each
// position, the item and row whose features replace the token embedding. Only a prompt's
// placeholders are placed; every other position, a placeholder id the model generated included,
// takes its token embedding, as in the reference.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace phi4mm {

struct MediaRows {
  using Features = std::shared_ptr<const std::vector<float>>;  // [rows, hidden]
  enum Kind : int8_t { kToken = 0, kImage = 1, kAudio = 2 };
  struct Ref {
    Kind kind = kToken;
    int32_t index = 0;  // into image / audio
    int32_t row = 0;    // in its features
  };
  std::vector<Features> image, audio;
  std::vector<Ref> at;  // per position

  // Appends the positions of `ids`, a prompt whose image placeholders take the rows of the items
  // appended here in order (item k has image_rows[k] rows), and likewise for audio. Placeholders
  // beyond the given rows take their token embedding.
  void Append(std::span<const int32_t> ids, std::vector<Features> images, std::span<const int64_t> image_rows,
              std::vector<Features> audios, std::span<const int64_t> audio_rows);
  const Features& features(const Ref& r) const { return r.kind == kImage ? image[r.index] : audio[r.index]; }
  Features& features(const Ref& r) { return r.kind == kImage ? image[r.index] : audio[r.index]; }
  // The rows that replace the embeddings of positions [start, start + n) (null: the token's own),
  // `hidden` floats per row; positions past the placed ones take their token embedding.
  void Overrides(int64_t start, int64_t n, int64_t hidden, std::vector<const float*>* out) const;
  void Clear() { *this = MediaRows(); }
};

}  // namespace phi4mm
