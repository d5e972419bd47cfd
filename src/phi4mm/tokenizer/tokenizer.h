// The Phi-4-mm text tokenizer: a byte-level BPE loaded from a Hugging Face tokenizer.json (plus
// tokenizer_config.json when present). Encoding splits out added tokens first (leftmost-longest,
// honouring lstrip/rstrip), pre-tokenizes each remaining segment with the Split regex of the file, maps
// bytes to byte-level symbols and merges pairs by merge priority. Decoding maps ids back to bytes.
// TokenStreamDecoder turns a stream of generated ids into text, holding back incomplete UTF-8.
#pragma once

#include <atomic>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "phi4mm/base/status.h"

namespace phi4mm {

class RegexSplitter;

// Bounds on one Encode call (Tokenizer::Encode).
struct EncodeLimits {
  int64_t max_tokens = -1;                    // -1: none
  const std::atomic<bool>* cancel = nullptr;  // checked every few thousand pieces
};

// One entry of tokenizer.json's "added_tokens".
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

class Tokenizer {
 public:
  // Loads dir/tokenizer.json and, if it exists, dir/tokenizer_config.json.
  static Result<std::shared_ptr<const Tokenizer>> LoadFromDir(const std::string& dir);
  // Loads from file contents; `tokenizer_config_json` may be empty. `source` names the origin in
  // error messages (for example the directory).
  static Result<std::shared_ptr<const Tokenizer>> LoadFromJson(const std::string& tokenizer_json,
                                                               const std::string& tokenizer_config_json,
                                                               const std::string& source = "tokenizer.json");
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes UTF-8 text. Added tokens in the text are recognised; no BOS/EOS is added. Invalid UTF-8
  // gives InvalidArgument naming the byte offset. Thread-safe.
  Result<std::vector<int32_t>> Encode(std::string_view text) const;
  // The same, bounded: OutOfRange as soon as the text is known to need more than
  // limits.max_tokens (before encoding a piece whose bytes alone exceed what is left, so a huge
  // text costs at most about max_tokens * max_token_bytes() bytes of work), Cancelled once
  // *limits.cancel turns true.
  Result<std::vector<int32_t>> Encode(std::string_view text, const EncodeLimits& limits) const;
  // The longest token in bytes (vocabulary and added tokens): no token covers more of a text.
  int64_t max_token_bytes() const { return max_token_bytes_; }
  // Concatenates the token bytes of `ids` and returns them as UTF-8, with ill-formed parts replaced by
  // U+FFFD. skip_special drops tokens flagged special. Ids without a string decode to "".
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // Raw bytes of one token ("" for ids the tokenizer does not define).
  std::string TokenBytes(int32_t id) const;
  // Id of an added token's content, or of the vocab entry whose raw bytes equal `token`.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  bool IsSpecial(int32_t id) const;
  // Highest id the tokenizer defines, plus one.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_bytes_.size()); }
  // The chat template of tokenizer_config.json ("" when absent).
  const std::string& chat_template() const { return chat_template_; }
  // Token strings named in tokenizer_config.json ("" when absent).
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  const std::string& pad_token() const { return pad_token_; }
  // model_max_length from tokenizer_config.json (0 when absent).
  int64_t model_max_length() const { return model_max_length_; }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }

 private:
  Tokenizer();
  friend class TokenizerLoader;

  // Encodes one segment that contains no added token.
  Status EncodeSegment(std::string_view segment, const EncodeLimits& limits, std::vector<int32_t>* out) const;
  // OutOfRange when `out` already holds more than limits.max_tokens, or `next_bytes` more bytes
  // need more tokens than are left.
  Status CheckLimit(const EncodeLimits& limits, size_t tokens, size_t next_bytes) const;
  // Byte-level BPE of one pre-tokenized piece.
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;
  void MergePiece(std::string_view piece, std::vector<int32_t>* out) const;

  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  std::vector<std::string> id_to_bytes_;
  std::vector<uint8_t> is_special_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;  // model vocab, by raw bytes
  std::unordered_map<uint64_t, Merge> merges_;            // (left << 32 | right) -> merge
  int32_t byte_ids_[256] = {};
  bool ignore_merges_ = false;
  std::vector<AddedToken> added_tokens_;  // sorted by content length, longest first
  bool added_first_byte_[256] = {};
  std::unique_ptr<RegexSplitter> splitter_;
  std::string chat_template_, bos_token_, eos_token_, pad_token_;
  int64_t model_max_length_ = 0;
  int64_t max_token_bytes_ = 1;

  // Piece -> ids cache for short pieces; cleared when full.
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// Turns generated ids into text incrementally. Push returns the text that became complete; bytes of
// a character split across tokens are held back until the character is whole. Flush returns what is
// left, with a dangling incomplete sequence replaced by U+FFFD. The concatenation of all Push results
// and Flush equals Decode of all ids. The tokenizer must outlive the decoder.
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  std::string Push(int32_t id);
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace phi4mm
