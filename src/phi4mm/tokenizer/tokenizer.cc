// Encoding and decoding of the byte-level BPE Tokenizer (loading lives in tokenizer_load.cc) and the
// streaming decoder. The BPE merge loop keeps the symbols of a piece in a linked list and candidate
// pairs in a min-heap ordered by (merge rank, position), so long pieces cost O(n log n).
#include "phi4mm/tokenizer/tokenizer.h"

#include <cstdio>
#include <functional>
#include <queue>
#include <tuple>

#include "phi4mm/tokenizer/regex_splitter.h"
#include "phi4mm/tokenizer/utf8.h"

namespace phi4mm {
namespace {

constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCacheEntries = 1 << 16;

// Whether the character starting at s[i] is a "word" character for single_word added tokens: ASCII
// letters, digits and '_', and (approximating Unicode alphanumerics) any non-ASCII non-space character.
bool IsWordCharAt(std::string_view s, size_t i) {
  const char c = s[i];
  if (static_cast<uint8_t>(c) < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  size_t len = 0;
  return !utf8::IsWhiteSpace(utf8::DecodeAt(s, i, &len));
}

// Start of the character that ends just before byte `end` of well-formed `s`.
size_t PrevCharStart(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const { return Encode(text, EncodeLimits{}); }

Status Tokenizer::CheckLimit(const EncodeLimits& limits, size_t tokens, size_t next_bytes) const {
  if (limits.max_tokens < 0) return Status::Ok();
  const auto max = static_cast<size_t>(limits.max_tokens);
  const size_t left = tokens <= max ? max - tokens : 0;
  const auto per_token = static_cast<size_t>(max_token_bytes_);
  if (tokens > max || (next_bytes > 0 && (next_bytes + per_token - 1) / per_token > left))
    return OutOfRange("the text needs more than " + std::to_string(max) + " tokens");
  return Status::Ok();
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, const EncodeLimits& limits) const {
  if (auto bad = utf8::FindInvalid(text)) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(static_cast<uint8_t>(text[*bad])));
    return InvalidArgument("text is not valid UTF-8: ill-formed sequence starting at byte offset " +
                           std::to_string(*bad) + " (byte " + hex + "); pass UTF-8 text");
  }
  // No token covers more than max_token_bytes_ of the text: a text that long needs that many.
  PHI4MM_RETURN_IF_ERROR(CheckLimit(limits, 0, text.size()));
  std::vector<int32_t> out;
  out.reserve(std::min<size_t>(text.size() / 3 + 4, limits.max_tokens >= 0 ? static_cast<size_t>(limits.max_tokens) + 1
                                                                           : text.size() / 3 + 4));
  size_t segment_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!added_first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    const AddedToken* match = nullptr;
    for (const AddedToken& t : added_tokens_) {  // longest first
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        const size_t end = i + t.content.size();
        if ((i > 0 && IsWordCharAt(text, PrevCharStart(text, i))) || (end < text.size() && IsWordCharAt(text, end))) {
          continue;
        }
      }
      match = &t;
      break;
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    size_t start = i;
    size_t stop = i + match->content.size();
    if (match->lstrip) {
      while (start > segment_start) {
        const size_t prev = PrevCharStart(text, start);
        size_t len = 0;
        if (!utf8::IsWhiteSpace(utf8::DecodeAt(text, prev, &len))) break;
        start = prev;
      }
    }
    if (match->rstrip) {
      while (stop < text.size()) {
        size_t len = 0;
        if (!utf8::IsWhiteSpace(utf8::DecodeAt(text, stop, &len))) break;
        stop += len;
      }
    }
    PHI4MM_RETURN_IF_ERROR(EncodeSegment(text.substr(segment_start, start - segment_start), limits, &out));
    out.push_back(match->id);
    PHI4MM_RETURN_IF_ERROR(CheckLimit(limits, out.size(), 0));
    segment_start = stop;
    i = stop;
  }
  PHI4MM_RETURN_IF_ERROR(EncodeSegment(text.substr(segment_start), limits, &out));
  return out;
}

Status Tokenizer::EncodeSegment(std::string_view segment, const EncodeLimits& limits, std::vector<int32_t>* out) const {
  if (segment.empty()) return Status::Ok();
  if (limits.cancel != nullptr && limits.cancel->load(std::memory_order_relaxed))
    return Cancelled("the text's encoding was cancelled");
  std::vector<std::string_view> pieces;
  // Every piece is at least one token: past the tokens left, the pieces need not be listed.
  size_t max_pieces = static_cast<size_t>(-1);
  if (limits.max_tokens >= 0) {
    const auto max = static_cast<size_t>(limits.max_tokens);
    max_pieces = (out->size() <= max ? max - out->size() : 0) + 1;
  }
  PHI4MM_RETURN_IF_ERROR(splitter_->Split(segment, &pieces, max_pieces));
  if (pieces.size() >= max_pieces) return CheckLimit(limits, out->size() + pieces.size(), 0);
  constexpr size_t kCheckEvery = 4096;
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (limits.max_tokens >= 0) PHI4MM_RETURN_IF_ERROR(CheckLimit(limits, out->size(), pieces[k].size()));
    if (limits.cancel != nullptr && k % kCheckEvery == kCheckEvery - 1 && limits.cancel->load(std::memory_order_relaxed))
      return Cancelled("the text's encoding was cancelled");
    EncodePiece(pieces[k], out);
  }
  return CheckLimit(limits, out->size(), 0);
}

void Tokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.size() == 1) {
    out->push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(std::string(piece));
    if (it != bytes_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out->size();
  MergePiece(piece, out);
  if (cacheable) {
    std::vector<int32_t> ids(out->begin() + static_cast<std::ptrdiff_t>(before), out->end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), std::move(ids));
  }
}

void Tokenizer::MergePiece(std::string_view piece, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  // (rank, position of the left symbol, left id, right id, merged id)
  using Candidate = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>;
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) {
    sym[k] = {byte_ids_[static_cast<uint8_t>(piece[k])], k - 1, k + 1 < n ? k + 1 : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(sym[pos].id)) << 32) |
                         static_cast<uint32_t>(sym[next].id);
    auto it = merges_.find(key);
    if (it != merges_.end()) heap.emplace(it->second.rank, pos, sym[pos].id, sym[next].id, it->second.merged_id);
  };
  for (int32_t k = 0; k + 1 < n; ++k) consider(k);
  while (!heap.empty()) {
    const auto [rank, pos, left, right, merged] = heap.top();
    heap.pop();
    // Stale candidates: a symbol's id only ever changes to a longer token, so comparing ids suffices.
    Symbol& s = sym[pos];
    if (s.id != left || s.next < 0 || sym[s.next].id != right) continue;
    const int32_t gone = s.next;
    s.id = merged;
    s.next = sym[gone].next;
    if (s.next >= 0) sym[s.next].prev = pos;
    sym[gone].id = -1;
    if (s.prev >= 0) consider(s.prev);
    consider(pos);
  }
  for (int32_t k = 0; k >= 0; k = sym[k].next) out->push_back(sym[k].id);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && is_special_[static_cast<size_t>(id)]) continue;
    bytes += id_to_bytes_[static_cast<size_t>(id)];
  }
  std::string out;
  out.reserve(bytes.size());
  utf8::AppendLossy(bytes, &out);
  return out;
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return id_to_bytes_[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  for (const AddedToken& t : added_tokens_) {
    if (t.content == token) return t.id;
  }
  auto it = bytes_to_id_.find(std::string(token));
  if (it != bytes_to_id_.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && is_special_[static_cast<size_t>(id)] != 0;
}

TokenStreamDecoder::TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string TokenStreamDecoder::Push(int32_t id) {
  if (skip_special_ && tokenizer_.IsSpecial(id)) return "";
  pending_ += tokenizer_.TokenBytes(id);
  const size_t keep = utf8::IncompleteTailLength(pending_);
  std::string out;
  utf8::AppendLossy(std::string_view(pending_).substr(0, pending_.size() - keep), &out);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string TokenStreamDecoder::Flush() {
  std::string out;
  utf8::AppendLossy(pending_, &out);
  pending_.clear();
  return out;
}

}  // namespace phi4mm
