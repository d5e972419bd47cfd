// Reads tokenizer.json in one streaming (SAX) pass: the two large tables, model.vocab (~200k
// entries for o200k) and model.merges (~200k), go straight into flat vectors, and everything else
// becomes an ordinary nlohmann::json tree. Building a JSON tree of the tables cost most of the
// tokenizer's load time (one map node and two strings per entry, then their destruction), about
// 1 s in a release build and several seconds under AddressSanitizer. The tree keeps a table as
// an empty object/array where the file had one, so "is it there, is it the right type" checks
// read the tree as before; the entries are checked by the loader from the vectors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi4mm/base/status.h"

namespace phi4mm {

struct TokenizerJson {
  nlohmann::json root;  // the file without the entries of model.vocab and model.merges

  struct VocabEntry {
    std::string token;  // the byte-level string, as written
    int64_t id = 0;
    bool integer = true;  // false: the value was not an integer (id is then meaningless)
  };
  std::vector<VocabEntry> vocab;  // in file order (the last model.vocab object, as a tree keeps)

  struct MergeEntry {
    enum class Form { kString, kPair, kOther } form = Form::kOther;
    std::string left;   // kString: the whole "a b" string; kPair: the first token
    std::string right;  // kPair: the second token
  };
  std::vector<MergeEntry> merges;  // in file order
};

// Parses `text`; a syntax error names the byte where it was found.
Result<TokenizerJson> ParseTokenizerJson(const std::string& text, const std::string& name);

// The whole of a small tokenizer file (tokenizer_config.json) as a tree, with the same errors.
Result<nlohmann::json> ParseJsonTree(const std::string& text, const std::string& name);

}  // namespace phi4mm
