// MediaRows: placing a prompt's media rows and reading them back for the embedding.
#include "phi4mm/runtime/media_rows.h"

#include <algorithm>
#include <iterator>

#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm {

void MediaRows::Append(std::span<const int32_t> ids, std::vector<Features> images, std::span<const int64_t> image_rows,
                       std::vector<Features> audios, std::span<const int64_t> audio_rows) {
  struct Cursor {
    std::vector<Features>* items;
    std::span<const int64_t> rows;
    size_t base, k = 0;
    int64_t row = 0;
  };
  Cursor img{&image, image_rows, image.size()}, aud{&audio, audio_rows, audio.size()};
  image.insert(image.end(), std::make_move_iterator(images.begin()), std::make_move_iterator(images.end()));
  audio.insert(audio.end(), std::make_move_iterator(audios.begin()), std::make_move_iterator(audios.end()));
  for (int32_t id : ids) {
    Cursor* c = id == kImageTokenId ? &img : id == kAudioTokenId ? &aud : nullptr;
    if (c == nullptr || c->k >= c->rows.size()) {
      at.push_back({});
      continue;
    }
    at.push_back({c == &img ? kImage : kAudio, static_cast<int32_t>(c->base + c->k), static_cast<int32_t>(c->row)});
    if (++c->row == c->rows[c->k]) ++c->k, c->row = 0;
  }
}

void MediaRows::Overrides(int64_t start, int64_t n, int64_t hidden, std::vector<const float*>* out) const {
  out->assign(static_cast<size_t>(n), nullptr);
  const int64_t end = std::min<int64_t>(start + n, static_cast<int64_t>(at.size()));
  for (int64_t p = start; p < end; ++p)
    if (at[p].kind != kToken) (*out)[p - start] = features(at[p])->data() + static_cast<int64_t>(at[p].row) * hidden;
}

}  // namespace phi4mm
