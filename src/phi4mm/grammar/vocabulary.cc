// VocabularyOf: the tokenizer's vocabulary as the grammar engine sees it. Added tokens (the chat
// format's control tokens, the media placeholders) and ids without bytes are "special": a grammar
// never allows them, so a constrained answer is made of ordinary text tokens only.
#include "phi4mm/grammar/grammar.h"
#include "phi4mm/tokenizer/tokenizer.h"

namespace phi4mm::grammar {

Vocabulary VocabularyOf(const Tokenizer& tokenizer, int64_t rows) {
  Vocabulary v;
  v.rows = rows;
  const int32_t n = tokenizer.vocab_size();
  v.token_bytes.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id)
    if (!tokenizer.IsSpecial(id)) v.token_bytes[static_cast<size_t>(id)] = tokenizer.TokenBytes(id);
  for (const AddedToken& t : tokenizer.added_tokens())
    if (t.id >= 0 && t.id < n) v.token_bytes[static_cast<size_t>(t.id)].clear();
  return v;
}

}  // namespace phi4mm::grammar
