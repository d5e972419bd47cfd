// The streaming reader of tokenizer.json (see tokenizer_json.h): a SAX handler for nlohmann's
// parser that builds the tree itself, one container frame per open object/array, except inside
// model.vocab and model.merges, whose entries it appends to TokenizerJson's vectors.
#include "phi4mm/tokenizer/tokenizer_json.h"

#include <exception>
#include <limits>
#include <utility>

namespace phi4mm {

namespace {

using json = nlohmann::json;

class Handler {
 public:
  explicit Handler(TokenizerJson* out) : out_(out) {}

  bool null() { return Scalar(json(nullptr)); }
  bool boolean(bool v) { return Scalar(json(v)); }
  bool number_integer(json::number_integer_t v) { return Scalar(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Scalar(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return Scalar(json(v)); }
  bool string(json::string_t& v) {
    switch (Mode()) {
      case Frame::kMerges:
        out_->merges.push_back({TokenizerJson::MergeEntry::Form::kString, std::move(v), {}});
        return true;
      case Frame::kMergePair: {
        Frame& f = stack_.back();
        if (f.items == 0) pair_.left = std::move(v);
        if (f.items == 1) pair_.right = std::move(v);
        ++f.items;
        return true;
      }
      default:
        return Scalar(json(std::move(v)));
    }
  }
  bool binary(json::binary_t&) { return Scalar(json()); }

  bool key(json::string_t& k) {
    if (Mode() == Frame::kVocab) {
      pending_token_ = std::move(k);
    } else if (Mode() == Frame::kTree) {
      stack_.back().key = std::move(k);
    }
    return true;
  }

  bool start_object(std::size_t) { return Open(json::object(), /*is_object=*/true); }
  bool start_array(std::size_t) { return Open(json::array(), /*is_object=*/false); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    error_byte_ = position;
    return false;
  }
  std::size_t error_byte() const { return error_byte_; }

 private:
  struct Frame {
    enum Kind { kTree, kVocab, kMerges, kMergePair, kSkip } kind = kTree;
    json* node = nullptr;  // kTree: the container being filled
    std::string key;       // kTree objects: the key of the value that comes next
    int64_t items = 0;     // kMergePair: strings seen; any other value makes it malformed
    bool bad = false;      // kMergePair: held something other than a string
  };

  Frame::Kind Mode() const { return stack_.empty() ? Frame::kTree : stack_.back().kind; }

  // A value of the tree's current container (or the root itself).
  json* Place(json v) {
    if (stack_.empty()) {
      out_->root = std::move(v);
      return &out_->root;
    }
    Frame& f = stack_.back();
    if (f.node->is_array()) {
      f.node->push_back(std::move(v));
      return &f.node->back();
    }
    json& slot = (*f.node)[f.key];
    slot = std::move(v);
    return &slot;
  }

  // A scalar inside a table entry is that entry; elsewhere it goes into the tree.
  bool Scalar(json v) {
    switch (Mode()) {
      case Frame::kVocab:
        if (v.is_number_integer()) {
          const bool fits = !v.is_number_unsigned() ||
                            v.get<json::number_unsigned_t>() <= uint64_t{std::numeric_limits<int64_t>::max()};
          out_->vocab.push_back({std::move(pending_token_),
                                 fits ? v.get<int64_t>() : std::numeric_limits<int64_t>::max(), true});
        } else {
          out_->vocab.push_back({std::move(pending_token_), 0, false});
        }
        return true;
      case Frame::kMerges:
        out_->merges.push_back({});
        return true;
      case Frame::kMergePair:
        stack_.back().bad = true;
        ++stack_.back().items;
        return true;
      case Frame::kSkip:
        return true;
      case Frame::kTree:
        Place(std::move(v));
        return true;
    }
    return true;
  }

  // model.vocab / model.merges are the values of keys "vocab" / "merges" of the object under the
  // root's key "model".
  bool AtTable(const char* table) const {
    return stack_.size() == 2 && stack_[0].kind == Frame::kTree && stack_[0].node->is_object() &&
           stack_[0].key == "model" && stack_[1].kind == Frame::kTree && stack_[1].node->is_object() &&
           stack_[1].key == table;
  }

  bool Open(json container, bool is_object) {
    Frame f;
    switch (Mode()) {
      case Frame::kTree:
        if (is_object && AtTable("vocab")) {
          out_->vocab.clear();  // a repeated key keeps the last value, as in a tree
          f.kind = Frame::kVocab;
        } else if (!is_object && AtTable("merges")) {
          out_->merges.clear();
          f.kind = Frame::kMerges;
        }
        f.node = Place(std::move(container));
        if (f.kind != Frame::kTree) f.node = nullptr;  // the table stays empty in the tree
        break;
      case Frame::kVocab:  // an object or array as an id
        out_->vocab.push_back({std::move(pending_token_), 0, false});
        f.kind = Frame::kSkip;
        break;
      case Frame::kMerges:  // a [left, right] pair, or an object (malformed)
        if (is_object) {
          out_->merges.push_back({});
          f.kind = Frame::kSkip;
        } else {
          pair_ = {};
          f.kind = Frame::kMergePair;
        }
        break;
      case Frame::kMergePair:
        stack_.back().bad = true;
        ++stack_.back().items;
        f.kind = Frame::kSkip;
        break;
      case Frame::kSkip:
        f.kind = Frame::kSkip;
        break;
    }
    stack_.push_back(std::move(f));
    return true;
  }

  bool Close() {
    const Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.kind == Frame::kMergePair) {
      if (!f.bad && f.items == 2) {
        pair_.form = TokenizerJson::MergeEntry::Form::kPair;
        out_->merges.push_back(std::move(pair_));
      } else {
        out_->merges.push_back({});
      }
    }
    return true;
  }

  TokenizerJson* out_;
  std::vector<Frame> stack_;
  std::string pending_token_;
  TokenizerJson::MergeEntry pair_;
  std::size_t error_byte_ = 0;
};

Status SyntaxError(const std::string& name, std::size_t byte) {
  return InvalidArgument(name + ": not valid JSON (parse error at byte " + std::to_string(byte) +
                         "); the file may be truncated or not a tokenizer file");
}

Status OtherParseError(const std::string& name, const std::exception& e) {
  return InvalidArgument(name + ": not valid JSON (" + e.what() + ")");
}

}  // namespace

Result<TokenizerJson> ParseTokenizerJson(const std::string& text, const std::string& name) {
  TokenizerJson out;
  Handler h(&out);
  try {
    if (!json::sax_parse(text, &h)) return SyntaxError(name, h.error_byte());
  } catch (const std::exception& e) {
    return OtherParseError(name, e);
  }
  return out;
}

Result<json> ParseJsonTree(const std::string& text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    return SyntaxError(name, e.byte);
  } catch (const std::exception& e) {
    return OtherParseError(name, e);
  }
}

}  // namespace phi4mm
