// Loading of Tokenizer from tokenizer.json / tokenizer_config.json: parses the JSON, checks that the
// file describes a byte-level BPE this implementation reproduces exactly (Split regex + ByteLevel
// pre-tokenizer, no normalizer, ByteLevel decoder), converts byte-level vocab strings to raw bytes and
// builds the merge table. Every problem is reported as a Status naming the file and the field.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>

#include <nlohmann/json.hpp>

#include "phi4mm/base/file_map.h"
#include "phi4mm/tokenizer/regex_splitter.h"
#include "phi4mm/tokenizer/tokenizer.h"
#include "phi4mm/tokenizer/tokenizer_json.h"
#include "phi4mm/tokenizer/utf8.h"

namespace phi4mm {

using json = nlohmann::json;

namespace {

// Largest id accepted from a file; guards against absurd allocations from corrupt input.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// The inverse of GPT-2's bytes_to_unicode: code point -> byte, or -1.
struct ByteLevelAlphabet {
  int16_t byte_of[324];
  ByteLevelAlphabet() {
    std::fill(std::begin(byte_of), std::end(byte_of), int16_t{-1});
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int cp = printable ? b : 256 + extra++;
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelAlphabet& Alphabet() {
  static const ByteLevelAlphabet kAlphabet;
  return kAlphabet;
}

// Converts a byte-level vocab string to raw bytes; false if a character is outside the alphabet.
bool ByteLevelToBytes(const std::string& s, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const char32_t cp = utf8::DecodeAt(s, i, &len);
    if (cp >= 324 || Alphabet().byte_of[cp] < 0) return false;
    out->push_back(static_cast<char>(Alphabet().byte_of[cp]));
    i += len;
  }
  return true;
}

std::string Quote(const std::string& s) {
  std::string q = s.size() > 60 ? s.substr(0, 60) + "..." : s;
  return "\"" + q + "\"";
}

std::string TypeOf(const json& j, const std::string& def = "") {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"].get<std::string>();
  return def;
}

bool FlagOr(const json& j, const char* key, bool def) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return def;
  return j[key].is_boolean() ? j[key].get<bool>() : def;
}

// A token string in tokenizer_config.json: "text" or {"content": "text", ...}.
std::string ConfigTokenString(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

class TokenizerLoader {
 public:
  static Result<std::shared_ptr<const Tokenizer>> Load(const std::string& json_text,
                                                       const std::string& config_text,
                                                       const std::string& json_name,
                                                       const std::string& config_name) {
    std::shared_ptr<Tokenizer> tok(new Tokenizer());
    try {
      PHI4MM_RETURN_IF_ERROR(LoadModel(json_text, json_name, tok.get()));
      if (!config_text.empty()) PHI4MM_RETURN_IF_ERROR(LoadConfig(config_text, config_name, tok.get()));
    } catch (const std::exception& e) {
      return InvalidArgument(json_name + ": unexpected structure (" + e.what() + ")");
    }
    for (const std::string& bytes : tok->id_to_bytes_)
      tok->max_token_bytes_ = std::max(tok->max_token_bytes_, static_cast<int64_t>(bytes.size()));
    for (const AddedToken& a : tok->added_tokens_)
      tok->max_token_bytes_ = std::max(tok->max_token_bytes_, static_cast<int64_t>(a.content.size()));
    return std::shared_ptr<const Tokenizer>(std::move(tok));
  }

 private:
  static Status LoadModel(const std::string& text, const std::string& name, Tokenizer* tok) {
    PHI4MM_ASSIGN_OR_RETURN(TokenizerJson file, ParseTokenizerJson(text, name));
    const json& root = file.root;
    if (!root.is_object()) return InvalidArgument(name + ": top level is not a JSON object");
    if (!root.contains("model") || !root["model"].is_object()) {
      return InvalidArgument(name + ": missing \"model\" object; is this a Hugging Face tokenizer.json?");
    }
    const json& model = root["model"];
    const std::string type = TypeOf(model, "BPE");
    if (type != "BPE") {
      return Unsupported(name + ": model type \"" + type + "\" is not supported; only byte-level BPE is");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
        return Unsupported(name + ": model." + key + " is set; only plain byte-level BPE is supported");
      }
    }
    tok->ignore_merges_ = FlagOr(model, "ignore_merges", false);
    PHI4MM_RETURN_IF_ERROR(LoadVocab(model, file.vocab, name, tok));
    PHI4MM_RETURN_IF_ERROR(LoadMerges(model, file.merges, name, tok));
    PHI4MM_RETURN_IF_ERROR(LoadAddedTokens(root, name, tok));
    PHI4MM_RETURN_IF_ERROR(CheckNormalizerAndDecoder(root, name));
    return LoadPreTokenizer(root, name, tok);
  }

  // `model.vocab` in the tree is only checked for presence and type; its entries are `vocab`.
  static Status LoadVocab(const json& model, const std::vector<TokenizerJson::VocabEntry>& vocab,
                          const std::string& name, Tokenizer* tok) {
    if (!model.contains("vocab") || !model["vocab"].is_object()) {
      return InvalidArgument(name + ": model.vocab is missing or not an object");
    }
    if (vocab.empty()) return InvalidArgument(name + ": model.vocab is empty");
    std::string bytes;
    tok->bytes_to_id_.reserve(vocab.size());
    for (const TokenizerJson::VocabEntry& e : vocab) {
      if (!e.integer) return InvalidArgument(name + ": vocab entry " + Quote(e.token) + " has a non-integer id");
      const int64_t id = e.id;
      if (id < 0 || id > kMaxTokenId) {
        return InvalidArgument(name + ": vocab entry " + Quote(e.token) + " has id " + std::to_string(id) +
                               ", outside 0.." + std::to_string(kMaxTokenId));
      }
      if (!ByteLevelToBytes(e.token, &bytes)) {
        return InvalidArgument(name + ": vocab entry " + Quote(e.token) +
                               " has a character outside the byte-level alphabet; not a byte-level BPE");
      }
      const auto uid = static_cast<size_t>(id);
      if (uid >= tok->id_to_bytes_.size()) {
        tok->id_to_bytes_.resize(uid + 1);
        tok->is_special_.resize(uid + 1, 0);
      }
      if (!tok->id_to_bytes_[uid].empty()) {
        return InvalidArgument(name + ": duplicate id " + std::to_string(id) + " in model.vocab");
      }
      if (bytes.empty()) return InvalidArgument(name + ": vocab entry with id " + std::to_string(id) + " is empty");
      if (!tok->bytes_to_id_.emplace(bytes, static_cast<int32_t>(id)).second) {
        return InvalidArgument(name + ": vocab entry " + Quote(e.token) + " appears twice in model.vocab");
      }
      tok->id_to_bytes_[uid] = bytes;
    }
    for (int b = 0; b < 256; ++b) {
      auto it = tok->bytes_to_id_.find(std::string(1, static_cast<char>(b)));
      if (it == tok->bytes_to_id_.end()) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02X", b);
        return InvalidArgument(name + ": model.vocab has no token for byte " + hex +
                               "; a byte-level BPE needs all 256 single-byte tokens");
      }
      tok->byte_ids_[b] = it->second;
    }
    return Status::Ok();
  }

  // Like LoadVocab: `model.merges` in the tree is empty; its entries are `merges`.
  static Status LoadMerges(const json& model, const std::vector<TokenizerJson::MergeEntry>& merges,
                           const std::string& name, Tokenizer* tok) {
    if (!model.contains("merges") || !model["merges"].is_array()) {
      return InvalidArgument(name + ": model.merges is missing or not an array");
    }
    tok->merges_.reserve(merges.size());
    std::string left_s, right_s, left, right;
    int32_t rank = 0;
    using Form = TokenizerJson::MergeEntry::Form;
    for (const TokenizerJson::MergeEntry& m : merges) {
      const auto where = [&] { return name + ": merge #" + std::to_string(rank); };
      if (m.form == Form::kString) {
        const std::string& s = m.left;
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return InvalidArgument(where() + " " + Quote(s) + " is not two tokens separated by one space");
        }
        left_s = s.substr(0, sp);
        right_s = s.substr(sp + 1);
      } else if (m.form == Form::kPair) {
        left_s = m.left;
        right_s = m.right;
      } else {
        return InvalidArgument(where() + " is neither \"a b\" nor [\"a\", \"b\"]");
      }
      if (!ByteLevelToBytes(left_s, &left) || !ByteLevelToBytes(right_s, &right)) {
        return InvalidArgument(where() + " has a character outside the byte-level alphabet");
      }
      auto l = tok->bytes_to_id_.find(left);
      auto r = tok->bytes_to_id_.find(right);
      auto merged = tok->bytes_to_id_.find(left + right);
      if (l == tok->bytes_to_id_.end() || r == tok->bytes_to_id_.end()) {
        return InvalidArgument(where() + " (" + Quote(left_s) + " + " + Quote(right_s) +
                               ") uses a token that is not in model.vocab");
      }
      if (merged == tok->bytes_to_id_.end()) {
        return InvalidArgument(where() + " (" + Quote(left_s) + " + " + Quote(right_s) +
                               ") produces a token that is not in model.vocab");
      }
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                           static_cast<uint32_t>(r->second);
      tok->merges_.emplace(key, Tokenizer::Merge{rank, merged->second});  // first (best) rank wins
      ++rank;
    }
    return Status::Ok();
  }

  static Status LoadAddedTokens(const json& root, const std::string& name, Tokenizer* tok) {
    if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return Status::Ok();
    if (!root["added_tokens"].is_array()) return InvalidArgument(name + ": added_tokens is not an array");
    std::vector<uint8_t> seen;
    for (const json& t : root["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string()) {
        return InvalidArgument(name + ": an added_tokens entry lacks an integer \"id\" or a string \"content\"");
      }
      AddedToken a;
      const int64_t id = t["id"].get<int64_t>();
      a.content = t["content"].get<std::string>();
      if (id < 0 || id > kMaxTokenId) {
        return InvalidArgument(name + ": added token " + Quote(a.content) + " has id " + std::to_string(id) +
                               ", outside 0.." + std::to_string(kMaxTokenId));
      }
      if (a.content.empty()) return InvalidArgument(name + ": added token " + std::to_string(id) + " is empty");
      a.id = static_cast<int32_t>(id);
      a.special = FlagOr(t, "special", false);
      a.lstrip = FlagOr(t, "lstrip", false);
      a.rstrip = FlagOr(t, "rstrip", false);
      a.single_word = FlagOr(t, "single_word", false);
      const auto uid = static_cast<size_t>(id);
      if (uid >= seen.size()) seen.resize(uid + 1, 0);
      if (seen[uid]) return InvalidArgument(name + ": duplicate id " + std::to_string(id) + " in added_tokens");
      seen[uid] = 1;
      if (uid >= tok->id_to_bytes_.size()) {
        tok->id_to_bytes_.resize(uid + 1);
        tok->is_special_.resize(uid + 1, 0);
      }
      tok->id_to_bytes_[uid] = a.content;
      tok->is_special_[uid] = a.special ? 1 : 0;
      tok->added_first_byte_[static_cast<uint8_t>(a.content[0])] = true;
      tok->added_tokens_.push_back(std::move(a));
    }
    std::stable_sort(tok->added_tokens_.begin(), tok->added_tokens_.end(),
                     [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
    return Status::Ok();
  }

  static Status CheckNormalizerAndDecoder(const json& root, const std::string& name) {
    if (root.contains("normalizer") && !root["normalizer"].is_null()) {
      return Unsupported(name + ": normalizer \"" + TypeOf(root["normalizer"], "?") +
                         "\" is not supported; the byte-level BPE expects \"normalizer\": null");
    }
    if (!root.contains("decoder") || TypeOf(root["decoder"]) != "ByteLevel") {
      const std::string got = root.contains("decoder") ? TypeOf(root["decoder"], "null") : "missing";
      return Unsupported(name + ": decoder is " + got + "; only a ByteLevel decoder is supported");
    }
    return Status::Ok();
  }

  static Status LoadPreTokenizer(const json& root, const std::string& name, Tokenizer* tok) {
    const std::string need = "; expected Sequence[Split(Regex), ByteLevel(use_regex=false)]";
    if (!root.contains("pre_tokenizer") || !root["pre_tokenizer"].is_object()) {
      return Unsupported(name + ": pre_tokenizer is missing" + need);
    }
    const json& pre = root["pre_tokenizer"];
    std::vector<json> steps;
    if (TypeOf(pre) == "Sequence") {
      if (!pre.contains("pretokenizers") || !pre["pretokenizers"].is_array()) {
        return InvalidArgument(name + ": pre_tokenizer Sequence lacks a \"pretokenizers\" array");
      }
      for (const json& s : pre["pretokenizers"]) steps.push_back(s);
    } else {
      steps.push_back(pre);
    }
    if (steps.size() != 2 || TypeOf(steps[0]) != "Split" || TypeOf(steps[1]) != "ByteLevel") {
      return Unsupported(name + ": unsupported pre_tokenizer layout" + need);
    }
    const json& split = steps[0];
    const json& byte_level = steps[1];
    if (FlagOr(byte_level, "use_regex", true) || FlagOr(byte_level, "add_prefix_space", false)) {
      return Unsupported(name + ": ByteLevel pre-tokenizer must have use_regex=false and add_prefix_space=false");
    }
    if (!split.contains("pattern") || !split["pattern"].is_object() || !split["pattern"].contains("Regex") ||
        !split["pattern"]["Regex"].is_string()) {
      return Unsupported(name + ": the Split pre-tokenizer has no {\"Regex\": ...} pattern");
    }
    const std::string behavior = split.contains("behavior") && split["behavior"].is_string()
                                     ? split["behavior"].get<std::string>()
                                     : "";
    const bool invert = FlagOr(split, "invert", false);
    bool keep_gaps = true;
    if (behavior == "Isolated" && !invert) {
      keep_gaps = true;
    } else if (behavior == "Removed" && invert) {
      keep_gaps = false;
    } else {
      return Unsupported(name + ": Split behavior \"" + behavior + "\" with invert=" + (invert ? "true" : "false") +
                         " is not supported (use Isolated/false or Removed/true)");
    }
    auto splitter = RegexSplitter::Create(split["pattern"]["Regex"].get<std::string>(), keep_gaps);
    if (!splitter.ok()) return splitter.status().WithContext(name);
    tok->splitter_ = std::move(splitter).value();
    return Status::Ok();
  }

  static Status LoadConfig(const std::string& text, const std::string& name, Tokenizer* tok) {
    PHI4MM_ASSIGN_OR_RETURN(json cfg, ParseJsonTree(text, name));
    if (!cfg.is_object()) return InvalidArgument(name + ": top level is not a JSON object");
    if (cfg.contains("chat_template")) {
      const json& t = cfg["chat_template"];
      if (t.is_string()) {
        tok->chat_template_ = t.get<std::string>();
      } else if (t.is_array()) {
        for (const json& e : t) {
          if (e.is_object() && e.contains("template") && e["template"].is_string() &&
              (tok->chat_template_.empty() || (e.contains("name") && e["name"] == "default"))) {
            tok->chat_template_ = e["template"].get<std::string>();
          }
        }
      } else if (!t.is_null()) {
        return InvalidArgument(name + ": chat_template is neither a string nor a list of templates");
      }
    }
    tok->bos_token_ = ConfigTokenString(cfg, "bos_token");
    tok->eos_token_ = ConfigTokenString(cfg, "eos_token");
    tok->pad_token_ = ConfigTokenString(cfg, "pad_token");
    if (cfg.contains("model_max_length") && cfg["model_max_length"].is_number()) {
      const double v = cfg["model_max_length"].get<double>();
      tok->model_max_length_ =
          v >= 9.0e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(std::max(0.0, v));
    }
    return Status::Ok();
  }
};

Result<std::shared_ptr<const Tokenizer>> Tokenizer::LoadFromJson(const std::string& tokenizer_json,
                                                                 const std::string& tokenizer_config_json,
                                                                 const std::string& source) {
  return TokenizerLoader::Load(tokenizer_json, tokenizer_config_json, source,
                               source == "tokenizer.json" ? "tokenizer_config.json" : source + " (config)");
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::LoadFromDir(const std::string& dir) {
  const std::string json_path = JoinPath(dir, "tokenizer.json");
  const std::string config_path = JoinPath(dir, "tokenizer_config.json");
  if (!FileExists(json_path)) {
    return NotFound(json_path + " does not exist; the tokenizer directory needs a Hugging Face tokenizer.json");
  }
  PHI4MM_ASSIGN_OR_RETURN(std::string json_text, ReadFileToString(json_path));
  std::string config_text;
  if (FileExists(config_path)) {
    PHI4MM_ASSIGN_OR_RETURN(config_text, ReadFileToString(config_path));
  }
  return TokenizerLoader::Load(json_text, config_text, json_path, config_path);
}

}  // namespace phi4mm
