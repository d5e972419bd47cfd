// CheckSchemaSupported: a walk over the schema that accepts the keywords the grammar engine
// enforces and refuses the rest with a JSON pointer (RFC 6901) to the offending part.
#include "phi4mm/grammar/schema_support.h"

#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace phi4mm::grammar {
namespace {

using Json = nlohmann::ordered_json;  // key order matters: the engine writes properties in schema order

struct Refusal {
  std::string pointer, what;
};

std::string Escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string Child(const std::string& ptr, const std::string& key) { return ptr + "/" + Escape(key); }
std::string Child(const std::string& ptr, size_t i) { return ptr + "/" + std::to_string(i); }

[[noreturn]] void Refuse(const std::string& ptr, std::string what) { throw Refusal{ptr.empty() ? "#" : "#" + ptr, std::move(what)}; }

bool Annotation(const std::string& k) {
  static const std::set<std::string> kKeys = {"title",    "description", "default",  "examples", "deprecated",
                                              "readOnly", "writeOnly",   "$comment", "$schema",  "$id"};
  return kKeys.count(k) > 0 || k.rfind("x-", 0) == 0;
}

const std::set<std::string>& Formats() {
  // Each is enforced with a pattern written here (SchemaForEngine) or XGrammar's own (ipv6, uuid).
  // Left out: duration, uri-reference, uri-template, json-pointer, relative-json-pointer, whose
  // XGrammar patterns hit its optional-group bug and which have no pattern here.
  static const std::set<std::string> kFormats = {"date", "time", "date-time", "email", "hostname",
                                                 "ipv4", "ipv6", "uuid",      "uri"};
  return kFormats;
}

std::string Unsupported(const std::string& k) {
  if (k == "not") return "\"not\" is not supported by the grammar engine; describe the allowed values positively";
  if (k == "if" || k == "then" || k == "else")
    return "conditional schemas (if/then/else) are not supported by the grammar engine; use anyOf of the cases";
  if (k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies")
    return "\"" + k + "\" is not supported by the grammar engine; use anyOf of the object shapes";
  if (k == "uniqueItems") return "uniqueItems: true is not supported by the grammar engine";
  if (k == "contains" || k == "minContains" || k == "maxContains")
    return "\"" + k + "\" is not supported by the grammar engine; use items or prefixItems";
  if (k == "$dynamicRef" || k == "$recursiveRef" || k == "$anchor" || k == "$dynamicAnchor" ||
      k == "$recursiveAnchor" || k == "$vocabulary")
    return "\"" + k + "\" is not supported; use \"$ref\": \"#/$defs/...\"";
  return "\"" + k + "\" is not a JSON Schema keyword the grammar engine knows (annotations and x-* extensions are allowed)";
}

// Whether a quantifier ("{n}", "{n,}", "{n,m}") starts at re[i]; its length, or 0.
size_t BraceQuantifier(const std::string& re, size_t i) {
  size_t j = i + 1, digits = 0;
  while (j < re.size() && re[j] >= '0' && re[j] <= '9') ++j, ++digits;
  if (digits == 0) return 0;
  if (j < re.size() && re[j] == ',') {
    ++j;
    while (j < re.size() && re[j] >= '0' && re[j] <= '9') ++j;
  }
  return j < re.size() && re[j] == '}' ? j + 1 - i : 0;
}

// The one grammar mistake in a pattern that the engine does not catch itself: a quantifier with
// nothing to repeat (at the start, after "(" or "|", or after another quantifier and its optional
// lazy "?"), as in "a???" or "(*x)". ECMA-262 calls these a SyntaxError; XGrammar 0.2.9 compiles
// them into some language of its own. Returns the problem, or "" for none.
std::string QuantifierProblem(const std::string& re) {
  enum class Prev { kNothing, kAtom, kQuantifier, kLazy };
  Prev prev = Prev::kNothing;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (in_class) {
      if (c == '\\') ++i;
      else if (c == ']') in_class = false;
      continue;
    }
    size_t quantifier = (c == '?' || c == '*' || c == '+') ? 1 : c == '{' ? BraceQuantifier(re, i) : 0;
    if (quantifier > 0) {
      if (c == '?' && prev == Prev::kQuantifier) {
        prev = Prev::kLazy;
        continue;
      }
      if (prev != Prev::kAtom)
        return "pattern: \"" + re.substr(i, quantifier) + "\" at offset " + std::to_string(i) +
               " has nothing to repeat (not a regular expression)";
      prev = Prev::kQuantifier;
      i += quantifier - 1;
      continue;
    }
    if (c == '\\') {
      ++i;
      prev = Prev::kAtom;
    } else if (c == '[') {
      in_class = true;
      if (i + 1 < re.size() && re[i + 1] == '^') ++i;
      if (i + 1 < re.size() && re[i + 1] == ']') ++i;
      prev = Prev::kAtom;
    } else if (c == '(') {
      if (i + 1 < re.size() && re[i + 1] == '?') {  // (?:...), (?=...), (?!...), (?<name>...)
        ++i;
        if (i + 1 < re.size() && re[i + 1] == '<') ++i;
        if (i + 1 < re.size()) ++i;
      }
      prev = Prev::kNothing;
    } else if (c == '|') {
      prev = Prev::kNothing;
    } else {
      prev = Prev::kAtom;  // a literal, ".", ")", "^", "$"
    }
  }
  return "";
}

class Walker {
 public:
  explicit Walker(const Json& root) : root_(root) {}

  void Schema(const Json& s, const std::string& ptr) {
    if (s.is_boolean()) return;
    if (!s.is_object()) Refuse(ptr, "a schema must be an object or a boolean");
    if (++depth_ > kMaxDepth) Refuse(ptr, "the schema nests deeper than " + std::to_string(kMaxDepth) + " levels");
    if (s.contains("pattern") && s.contains("format"))
      Refuse(Child(ptr, "pattern"), "pattern and format in one schema are not supported together (the grammar engine "
                                    "would keep only the format); keep one, or put the other in an allOf branch");
    for (auto it = s.begin(); it != s.end(); ++it) Keyword(it.key(), it.value(), ptr);
    --depth_;
  }

 private:
  void SchemaMap(const Json& v, const std::string& ptr, const char* what) {
    if (!v.is_object()) Refuse(ptr, std::string(what) + " must be an object of schemas");
    for (auto it = v.begin(); it != v.end(); ++it) Schema(it.value(), Child(ptr, it.key()));
  }
  void SchemaList(const Json& v, const std::string& ptr, const std::string& what) {
    if (!v.is_array() || v.empty()) Refuse(ptr, what + " must be a non-empty array of schemas");
    for (size_t i = 0; i < v.size(); ++i) Schema(v[i], Child(ptr, i));
  }
  static void NonNegative(const Json& v, const std::string& ptr, const std::string& k) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) Refuse(ptr, k + " must be a non-negative integer");
  }
  static void Number(const Json& v, const std::string& ptr, const std::string& k) {
    if (!v.is_number()) Refuse(ptr, k + " must be a number");
  }

  void Ref(const Json& v, const std::string& ptr) {
    if (!v.is_string()) Refuse(ptr, "$ref must be a string");
    const std::string ref = v.get<std::string>();
    if (ref == "#") return;
    if (ref.rfind("#/", 0) != 0)
      Refuse(ptr, "only references inside the schema (\"#/$defs/...\") are supported, not \"" + ref + "\"");
    const Json* at = &root_;
    size_t pos = 2;
    while (pos <= ref.size()) {
      size_t end = ref.find('/', pos);
      if (end == std::string::npos) end = ref.size();
      std::string token = ref.substr(pos, end - pos), key;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
          key += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += token[i];
        }
      }
      if (at->is_object() && at->contains(key)) at = &(*at)[key];
      else if (at->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
               std::stoull(key) < at->size())
        at = &(*at)[std::stoull(key)];
      else Refuse(ptr, "$ref \"" + ref + "\" points at nothing in the schema");
      pos = end + 1;
    }
  }

  void Keyword(const std::string& k, const Json& v, const std::string& ptr) {
    const std::string p = Child(ptr, k);
    if (Annotation(k)) return;
    if (k == "type") {
      static const std::set<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};
      auto one = [&](const Json& t, const std::string& tp) {
        if (!t.is_string() || kTypes.count(t.get<std::string>()) == 0)
          Refuse(tp, "type must be one of object, array, string, number, integer, boolean, null");
      };
      if (v.is_array()) {
        if (v.empty()) Refuse(p, "type must not be an empty list");
        for (size_t i = 0; i < v.size(); ++i) one(v[i], Child(p, i));
      } else {
        one(v, p);
      }
    } else if (k == "enum") {
      if (!v.is_array() || v.empty()) Refuse(p, "enum must be a non-empty array");
    } else if (k == "const") {
    } else if (k == "$ref") {
      Ref(v, p);
    } else if (k == "$defs" || k == "definitions") {
      SchemaMap(v, p, k.c_str());
    } else if (k == "anyOf" || k == "oneOf" || k == "allOf") {
      SchemaList(v, p, k);
    } else if (k == "properties" || k == "patternProperties") {
      SchemaMap(v, p, k.c_str());
    } else if (k == "additionalProperties" || k == "unevaluatedProperties" || k == "propertyNames" ||
               k == "unevaluatedItems") {
      Schema(v, p);
    } else if (k == "items") {
      if (v.is_array()) Refuse(p, "items as a list (draft 4 tuples) is not supported; use prefixItems");
      Schema(v, p);
    } else if (k == "prefixItems") {
      SchemaList(v, p, k);
    } else if (k == "required") {
      if (!v.is_array()) Refuse(p, "required must be an array of property names");
      for (size_t i = 0; i < v.size(); ++i)
        if (!v[i].is_string()) Refuse(Child(p, i), "required must list property names (strings)");
    } else if (k == "minProperties" || k == "maxProperties" || k == "minItems" || k == "maxItems" ||
               k == "minLength" || k == "maxLength") {
      NonNegative(v, p, k);
    } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
      if (v.is_boolean()) Refuse(p, k + " as a boolean (draft 4) is not supported; give the bound as a number");
      Number(v, p, k);
    } else if (k == "multipleOf") {
      Number(v, p, k);
      if (v.get<double>() <= 0) Refuse(p, "multipleOf must be greater than 0");
    } else if (k == "pattern") {
      if (!v.is_string()) Refuse(p, "pattern must be a string (a regular expression)");
      if (std::string problem = QuantifierProblem(v.get<std::string>()); !problem.empty()) Refuse(p, problem);
    } else if (k == "format") {
      if (!v.is_string() || Formats().count(v.get<std::string>()) == 0) {
        std::string known;
        for (const std::string& f : Formats()) known += (known.empty() ? "" : ", ") + f;
        Refuse(p, "format " + (v.is_string() ? "\"" + v.get<std::string>() + "\"" : std::string("value")) +
                      " is not one the grammar engine enforces (" + known + ")");
      }
    } else if (k == "uniqueItems" && v.is_boolean() && !v.get<bool>()) {
    } else {
      Refuse(p, Unsupported(k));
    }
  }

  static constexpr int kMaxDepth = 64;
  const Json& root_;
  int depth_ = 0;
};

// A regular expression with every optional group "(...)?" written "(...|)": XGrammar 0.2.9 drops
// the first atom of an optional group whose body repeats ("^x(ab+)?y$" lets "xbby" through), while
// the alternation with an empty branch is compiled right. Escapes and character classes are
// copied as they are.
std::string WithoutOptionalGroups(const std::string& re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      out += c;
      out += re[++i];
      continue;
    }
    if (in_class) {
      in_class = c != ']';
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
      if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];
      continue;
    }
    if (c == ')') {
      size_t marks = 0;
      while (i + 1 + marks < re.size() && re[i + 1 + marks] == '?') ++marks;
      // "?" or the lazy "??" (the same strings) become the empty branch; three or more marks are
      // not a regular expression and are left for the engine to refuse (rewriting them would make
      // an invalid pattern valid, and would not be stable under a second rewrite).
      if (marks == 1 || marks == 2) {
        out += "|)";
        i += marks;
        continue;
      }
    }
    out += c;
  }
  return out;
}

constexpr const char* kDate =
    "(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))";
constexpr const char* kTime = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]+|)(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
constexpr const char* kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9]|)";
constexpr const char* kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

void Rewrite(Json& v) {
  if (v.is_array()) {
    for (Json& x : v) Rewrite(x);
    return;
  }
  if (!v.is_object()) return;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "const" && it.key() != "enum" && it.key() != "default" && it.key() != "examples") Rewrite(*it);
  // A length-bounded string: XGrammar 0.2.9's own rule for it lets raw control characters (a tab)
  // into the string, which is not JSON; the same bounds as a pattern over JSON string characters.
  auto bound = [&](const char* k) { return v.contains(k) && v[k].is_number_integer(); };
  auto absent_or_bound = [&](const char* k) { return !v.contains(k) || bound(k); };
  if ((bound("minLength") || bound("maxLength")) && absent_or_bound("minLength") && absent_or_bound("maxLength") &&
      !v.contains("pattern") && !v.contains("format")) {
    const int64_t lo = bound("minLength") ? v["minLength"].get<int64_t>() : 0;
    const std::string hi = bound("maxLength") ? std::to_string(v["maxLength"].get<int64_t>()) : "";
    v.erase("minLength");
    v.erase("maxLength");
    v["pattern"] = "^[^\"\\\\\\x00-\\x1f]{" + std::to_string(lo) + "," + hi + "}$";
    return;
  }
  if (auto p = v.find("pattern"); p != v.end() && p->is_string()) {
    *p = WithoutOptionalGroups(p->get<std::string>());
    return;
  }
  auto f = v.find("format");
  if (f == v.end() || !f->is_string()) return;
  const std::string format = f->get<std::string>();
  std::string pattern;
  if (format == "date") pattern = std::string("^") + kDate + "$";
  else if (format == "date-time") pattern = std::string("^") + kDate + "T" + kTime + "$";
  else if (format == "time") pattern = std::string("^") + kTime + "$";
  else if (format == "ipv4") pattern = std::string("^(") + kOctet + "[.]){3}" + kOctet + "$";
  else if (format == "hostname") pattern = std::string("^") + kLabel + "([.]" + kLabel + ")*$";
  else if (format == "email") pattern = std::string("^[A-Za-z0-9_%+-]+([.][A-Za-z0-9_%+-]+)*@") + kLabel + "([.]" + kLabel + ")+$";
  else if (format == "uri") pattern = "^[A-Za-z][A-Za-z0-9+.-]*:[^\\x00-\\x20\"<>\\\\^`{|}]+$";
  if (pattern.empty()) return;
  v.erase("format");
  v["pattern"] = pattern;
}

}  // namespace

std::string SchemaForEngine(std::string_view schema_json) {
  Json schema = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return std::string(schema_json);
  Rewrite(schema);
  return schema.dump();
}

Status CheckSchemaSupported(std::string_view schema_json) {
  const Json schema = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return InvalidArgument("the schema is not valid JSON");
  if (schema.is_boolean() && !schema.get<bool>()) return InvalidArgument("#: the schema false accepts nothing");
  try {
    Walker(schema).Schema(schema, "");
  } catch (const Refusal& r) {
    return InvalidArgument(r.pointer + ": " + r.what);
  }
  return Status::Ok();
}

}  // namespace phi4mm::grammar
