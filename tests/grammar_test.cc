// Structured output below the server: which schemas the grammar layer accepts and refuses (with
// the JSON pointer of the offending part), the compiled-grammar cache, a matcher walking a JSON
// text's real tokens, and constrained sampling on the trained fixture through Session and the
// batched engine: every sampled answer parses and follows its schema, and both drivers give the
// same tokens for the same seed.
#include <gtest/gtest.h>

#include <limits>

#include <nlohmann/json.hpp>

#include "phi4mm/grammar/grammar.h"
#include "phi4mm/grammar/schema_support.h"
#include "phi4mm/runtime/engine.h"
#include "phi4mm/runtime/output_constraint.h"
#include "phi4mm/runtime/session.h"
#include "phi4mm/tokenizer/chat_format.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using nlohmann::json;

std::string Refusal(const std::string& schema) {
  const Status st = grammar::CheckSchemaSupported(schema);
  return st.ok() ? "" : st.message();
}

TEST(SchemaSupport, RefusesWhatTheEngineWouldIgnoreNamingWhere) {
  EXPECT_EQ(Refusal(R"({"type": "object", "properties": {"a": {"not": {"type": "null"}}}})").rfind("#/properties/a/not: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"if": {}, "then": {}})").rfind("#/if: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"type": "array", "uniqueItems": true})").rfind("#/uniqueItems: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"type": "string", "format": "credit-card"})").rfind("#/format: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"$ref": "https://example.com/s.json"})").rfind("#/$ref: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"$ref": "#/$defs/missing"})").rfind("#/$ref: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"type": "object", "properties": {"a/b": {"minLenght": 2}}})").rfind("#/properties/a~1b/minLenght: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"type": "array", "items": [{"type": "string"}]})").rfind("#/items: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"anyOf": []})").rfind("#/anyOf: ", 0), 0u);
  EXPECT_EQ(Refusal(R"({"type": "strin"})").rfind("#/type: ", 0), 0u);
  EXPECT_NE(Refusal("{"), "");
  // A quantifier with nothing to repeat; the rest of regular-expression grammar is the engine's.
  for (const char* re : {"*a", "(+a)", "a|?", "a**", "a+??", "a{2}{3}", "(a)???", "(?:?a)"})
    EXPECT_EQ(Refusal(R"({"type": "string", "pattern": ")" + std::string(re) + R"("})").rfind("#/pattern: ", 0), 0u) << re;
  for (const char* re : {"^a+?b{2,3}?(?:x|y)*$", "[?*+]+", "\\\\?+", "a{,3}", "(?=a)b", "(?<n>a)?", "[]?]?"})
    EXPECT_EQ(Refusal(R"({"type": "string", "pattern": ")" + std::string(re) + R"("})"), "") << re;
  // Keyword names used as property names are property names.
  EXPECT_EQ(Refusal(R"({"type": "object", "properties": {"minLength": {"type": "string"}, "pattern": {"const": 1}}})"), "");
  EXPECT_NE(grammar::SchemaForEngine(R"({"properties": {"minLength": {"type": "string", "maxLength": 2}}})").find("pattern"),
            std::string::npos);
  EXPECT_NE(Refusal("false"), "");
  std::string deep;
  for (int i = 0; i < 80; ++i) deep += R"({"items": )";
  deep += "true";
  for (int i = 0; i < 80; ++i) deep += "}";
  EXPECT_NE(Refusal(deep).find("deeper than"), std::string::npos);
}

TEST(SchemaSupport, AcceptsTheKeywordsTheEngineEnforces) {
  EXPECT_EQ(Refusal(R"({
    "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "t", "x-note": 1,
    "type": "object", "additionalProperties": false, "required": ["id", "tags", "kind"],
    "properties": {
      "id": {"type": "integer", "minimum": 1, "maximum": 99},
      "price": {"type": "number", "exclusiveMinimum": 0},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "minItems": 1, "maxItems": 3},
      "kind": {"enum": ["a", "b"]}, "version": {"const": 2},
      "when": {"type": "string", "format": "date"}, "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
      "child": {"$ref": "#/$defs/node"}, "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
      "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false},
      "one": {"oneOf": [{"type": "string"}, {"type": "integer"}]}
    },
    "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}}
  })"), "");
}

class GrammarOnTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const Tokenizer& tok = test::FixtureTokenizer();
    auto c = grammar::Compiler::Create(grammar::VocabularyOf(tok, tok.vocab_size() + 35));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    holder_ = std::move(c).value();
    compiler_ = holder_.get();
  }
  static std::shared_ptr<grammar::Compiler> holder_;
  static grammar::Compiler* compiler_;
};
std::shared_ptr<grammar::Compiler> GrammarOnTokenizer::holder_;
grammar::Compiler* GrammarOnTokenizer::compiler_ = nullptr;

TEST_F(GrammarOnTokenizer, CompilesOnceAndServesTheCacheAfter) {
  const std::string schema = R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})";
  const grammar::CompilerStats before = compiler_->stats();
  auto a = compiler_->JsonSchema(schema);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = compiler_->JsonSchema(schema);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());
  const grammar::CompilerStats after = compiler_->stats();
  EXPECT_EQ(after.compiled, before.compiled + 1);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
  // Not strict is another grammar.
  auto c = compiler_->JsonSchema(schema, /*strict=*/false);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->get(), c->get());
}

TEST_F(GrammarOnTokenizer, AWarningOfTheEngineRefusesTheSchema) {
  // XGrammar would drop minLength beside a pattern (it logs a warning): refused instead.
  auto r = compiler_->JsonSchema(R"({"type": "string", "pattern": "^[a-z]+$", "minLength": 2})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("would not enforce"), std::string::npos) << r.status().message();
  // And a schema that cannot be satisfied is a compile error, not a crash.
  auto u = compiler_->JsonSchema(R"({"type": "string", "minLength": 5, "maxLength": 2})");
  EXPECT_FALSE(u.ok());
}

TEST_F(GrammarOnTokenizer, MatcherAllowsEveryTokenOfAValidTextThenOnlyTheStopId) {
  const Tokenizer& tok = test::FixtureTokenizer();
  auto g = compiler_->JsonSchema(R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
                                      "required": ["name", "n"], "additionalProperties": false})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const int32_t stop = 200020;
  grammar::Matcher m(*g, std::span(&stop, 1));
  auto ids = tok.Encode(R"({"name": "Ada, 1815", "n": -42})");
  ASSERT_TRUE(ids.ok());
  std::vector<float> logits(static_cast<size_t>(compiler_->rows()));
  for (int32_t id : *ids) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    m.MaskLogits(logits);
    EXPECT_EQ(logits[id], 0.0f) << "token " << id << " '" << tok.TokenBytes(id) << "' masked";
    ASSERT_TRUE(m.Accept(id)) << tok.TokenBytes(id);
  }
  std::fill(logits.begin(), logits.end(), 0.0f);
  m.MaskLogits(logits);
  int64_t allowed = 0;
  for (float x : logits) allowed += x == 0.0f;
  EXPECT_EQ(allowed, 1);
  EXPECT_EQ(logits[stop], 0.0f);
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.Accept(stop));
  EXPECT_TRUE(m.terminated());
  // A token the grammar does not allow is refused without moving.
  grammar::Matcher fresh(*g, std::span(&stop, 1));
  auto bad = tok.Encode("[");
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(fresh.Accept((*bad)[0]));
}

// A small validator for the schemas below (the full suite validates with Python's jsonschema).
void ExpectPerson(const json& v, const std::string& what) {
  ASSERT_TRUE(v.is_object()) << what;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << what;
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << what;
  EXPECT_GE(v["age"].get<int64_t>(), 0) << what;
  EXPECT_LE(v["age"].get<int64_t>(), 150) << what;
  ASSERT_TRUE(v.contains("role")) << what;
  const std::string role = v["role"].get<std::string>();
  EXPECT_TRUE(role == "admin" || role == "user") << what;
  for (auto it = v.begin(); it != v.end(); ++it)
    EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "role") << what << ": " << it.key();
}

constexpr const char* kPersonSchema = R"({"type": "object", "additionalProperties": false,
  "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                 "role": {"enum": ["admin", "user"]}},
  "required": ["name", "age", "role"]})";

// The tool-call constraint: `grammar` between <|tool_call|> and <|/tool_call|>.
OutputConstraint ToolCallConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, bool must_open) {
  OutputConstraint c;
  c.grammar = std::move(grammar);
  c.between_tags = true;
  c.open_id = 200025;
  c.close_id = 200026;
  c.must_open = must_open;
  return c;
}

std::shared_ptr<const Model> Trained() {
  static std::shared_ptr<const Model> m = [] {
    auto r = Model::Load(test::FixturePath("trained/orig"));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : nullptr;
  }();
  return m;
}

GenerateOptions Sampled(const OutputConstraint& c, uint64_t seed) {
  GenerateOptions o;
  o.max_new_tokens = 96;
  o.sampling.temperature = 1.0f;
  o.sampling.top_p = 0.95f;
  o.sampling.seed = seed;
  o.constraint = c;
  return o;
}

TEST(ConstrainedGeneration, SampledAnswersFollowTheSchemaInSessionAndEngineAlike) {
  auto model = Trained();
  ASSERT_TRUE(model);
  auto compiler = model->grammar();
  ASSERT_TRUE(compiler.ok()) << compiler.status().ToString();
  auto g = (*compiler)->JsonSchema(kPersonSchema);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  OutputConstraint c;
  c.grammar = *g;
  auto prompt = model->tokenizer().Encode("<|user|>Describe a person as JSON.<|end|><|assistant|>");
  ASSERT_TRUE(prompt.ok());
  auto engine = Engine::Start(model);
  ASSERT_TRUE(engine.ok());
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Session s(model);
    auto r = s.Generate(*prompt, LoraMode::kNone, Sampled(c, seed));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const std::string what = "seed " + std::to_string(seed) + ": " + r->text;
    EXPECT_EQ(r->finish, FinishReason::kEos) << what;
    const json v = json::parse(r->text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << what;
    ExpectPerson(v, what);

    EngineRequest req;
    req.prompt_ids = *prompt;
    req.generate = Sampled(c, seed);
    auto h = (*engine)->Submit(std::move(req));
    ASSERT_TRUE(h.ok());
    auto er = h->Wait();
    ASSERT_TRUE(er.ok()) << er.status().ToString();
    EXPECT_EQ(er->generation.tokens, r->tokens) << what;
    EXPECT_EQ(er->generation.text, r->text);
  }
}

// Speculative decoding under a constraint: a draft is cut where the grammar refuses (those rows
// could never be taken), without moving the answer's own state, and the answer is the one
// without speculation.
TEST(ConstrainedGeneration, DraftsStopWhereTheGrammarRefuses) {
  auto model = Trained();
  ASSERT_TRUE(model);
  auto g = (*model->grammar())->JsonSchema(kPersonSchema);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  OutputConstraint c;
  c.grammar = *g;
  auto valid = model->tokenizer().Encode(R"({"name": "Al", "age": 3)");
  auto bad = model->tokenizer().Encode("hello");
  ASSERT_TRUE(valid.ok() && bad.ok());
  std::vector<int32_t> ids = *valid;
  ids.insert(ids.end(), bad->begin(), bad->end());
  const int32_t stop = 200020;
  ConstraintState st(c, std::span(&stop, 1));
  EXPECT_EQ(st.AllowedPrefix(ids), valid->size());
  EXPECT_EQ(st.AllowedPrefix(*bad), 0u);
  // The state did not move: the valid ids are still accepted from the start, one by one.
  for (int32_t id : *valid) ASSERT_TRUE(st.Accept(id).ok());
  EXPECT_EQ(st.AllowedPrefix(*bad), 0u);
  EXPECT_EQ(ConstraintState(OutputConstraint{}, std::span(&stop, 1)).AllowedPrefix(ids), ids.size());

  auto prompt = model->tokenizer().Encode("<|user|>Describe a person as JSON.<|end|><|assistant|>");
  ASSERT_TRUE(prompt.ok());
  auto engine = Engine::Start(model);
  ASSERT_TRUE(engine.ok());
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Session plain_session(model);
    auto plain = plain_session.Generate(*prompt, LoraMode::kNone, Sampled(c, seed));
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    // The answer with a placeholder id (never allowed by the grammar) after each of its ids: the
    // answer's last id is found in it, and what follows is refused at once, so nothing is drafted
    // (without the cut every step would verify a draft that starts with it).
    GenerateOptions refused = Sampled(c, seed);
    for (int32_t id : plain->tokens)
      refused.speculative.prediction.insert(refused.speculative.prediction.end(), {id, kImageTokenId});
    // The answer itself as the prediction: drafts are allowed and taken.
    GenerateOptions right = Sampled(c, seed);
    right.speculative.prediction = plain->tokens;
    for (const bool is_right : {false, true}) {
      const GenerateOptions& o = is_right ? right : refused;
      const std::string what = "seed " + std::to_string(seed) + (is_right ? " right" : " refused");
      Session s(model);
      auto r = s.Generate(*prompt, LoraMode::kNone, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->tokens, plain->tokens) << what;
      EXPECT_EQ(r->text, plain->text) << what;
      EngineRequest req;
      req.prompt_ids = *prompt;
      req.generate = o;
      auto h = (*engine)->Submit(std::move(req));
      ASSERT_TRUE(h.ok());
      auto er = h->Wait();
      ASSERT_TRUE(er.ok()) << er.status().ToString();
      EXPECT_EQ(er->generation.tokens, plain->tokens) << what;
      for (const GenerateResult* res : {&*r, &er->generation}) {
        if (is_right) {
          EXPECT_GT(res->accepted_draft_tokens, 0) << what;
          EXPECT_LE(res->accepted_draft_tokens, res->draft_tokens) << what;
        } else {
          EXPECT_EQ(res->draft_tokens, 0) << what;
        }
      }
    }
  }
}

TEST(ConstrainedGeneration, JsonObjectModeGivesAnObject) {
  auto model = Trained();
  ASSERT_TRUE(model);
  auto g = (*model->grammar())->JsonObject();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  OutputConstraint c;
  c.grammar = *g;
  auto prompt = model->tokenizer().Encode("<|user|>Any JSON object, please.<|end|><|assistant|>");
  ASSERT_TRUE(prompt.ok());
  int ended = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Session s(model);
    GenerateOptions o = Sampled(c, seed);
    o.max_new_tokens = 200;
    auto r = s.Generate(*prompt, LoraMode::kNone, o);
    ASSERT_TRUE(r.ok());
    if (r->finish != FinishReason::kEos) continue;  // an object cut by max tokens is not complete
    ++ended;
    const json v = json::parse(r->text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << r->text;
    EXPECT_TRUE(v.is_object()) << r->text;
  }
  EXPECT_GT(ended, 0);
}

TEST(ConstrainedGeneration, ToolCallTagsForcedOrEngagedOnTheOpenToken) {
  auto model = Trained();
  ASSERT_TRUE(model);
  auto g = (*model->grammar())->JsonSchema(R"({"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "object",
      "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"], "additionalProperties": false}},
      "required": ["name", "arguments"], "additionalProperties": false}})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const OutputConstraint c = ToolCallConstraint(*g, /*must_open=*/true);
  auto prompt = model->tokenizer().Encode("<|user|>Weather in Paris?<|end|><|assistant|>");
  ASSERT_TRUE(prompt.ok());
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Session s(model);
    auto r = s.Generate(*prompt, LoraMode::kNone, Sampled(c, seed));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_GE(r->tokens.size(), 3u);
    EXPECT_EQ(r->tokens.front(), 200025);
    EXPECT_EQ(r->finish, FinishReason::kEos);
    const auto close = std::find(r->tokens.begin(), r->tokens.end(), 200026);
    ASSERT_NE(close, r->tokens.end()) << model->tokenizer().Decode(r->tokens);
    EXPECT_EQ(close + 2, r->tokens.end()) << "the stop id follows the close tag";
    const std::string body = model->tokenizer().Decode(std::span(r->tokens).subspan(1, close - r->tokens.begin() - 1));
    const json v = json::parse(body, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << body;
    ASSERT_TRUE(v.is_array() && !v.empty()) << body;
    EXPECT_EQ(v[0]["name"], "get_weather");
    EXPECT_TRUE(v[0]["arguments"]["city"].is_string());
  }
}

TEST_F(GrammarOnTokenizer, BoundedStringsHoldOnlyJsonStringCharacters) {
  // XGrammar 0.2.9's own rule for a length-bounded string allows a raw tab (not JSON); the schema
  // it is given bounds the string with a pattern instead (SchemaForEngine).
  const Tokenizer& tok = test::FixtureTokenizer();
  auto g = compiler_->JsonSchema(R"({"type": "string", "minLength": 1, "maxLength": 6})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const int32_t stop = 200020;
  grammar::Matcher m(*g, std::span(&stop, 1));
  auto quote = tok.Encode("\"");
  auto tab = tok.Encode("\t");
  auto word = tok.Encode("abc");
  ASSERT_TRUE(quote.ok() && tab.ok() && word.ok());
  ASSERT_EQ(tab->size(), 1u);
  ASSERT_TRUE(m.Accept((*quote)[0]));
  std::vector<float> logits(static_cast<size_t>(compiler_->rows()), 0.0f);
  m.MaskLogits(logits);
  EXPECT_EQ(logits[(*tab)[0]], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits[(*word)[0]], 0.0f);
  EXPECT_EQ(grammar::SchemaForEngine(R"({"type": "string", "format": "ipv4"})").find("format"), std::string::npos);
  // XGrammar 0.2.9 drops the first atom of "(ab+)?"; the same language as an alternation.
  EXPECT_EQ(grammar::SchemaForEngine(R"({"pattern": "^x(a[0-9]+)?y([)?]\\)?)??$"})"),
            R"({"pattern":"^x(a[0-9]+|)y([)?]\\)?|)$"})");
  // Three marks after a group are no regular expression: left as they are, so the engine refuses
  // the schema (a 400) instead of the rewrite making it valid, and a second rewrite changes nothing
  // (schema_fuzz found "))???" turning into "|)?" and then "||)").
  const std::string marks = grammar::SchemaForEngine(R"({"type": "string", "pattern": "^(a)???$"})");
  EXPECT_EQ(marks, R"({"type":"string","pattern":"^(a)???$"})");
  EXPECT_EQ(grammar::SchemaForEngine(marks), marks);
  auto refused = compiler_->JsonSchema(R"({"type": "string", "pattern": "^(a)???$"})");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("#/pattern"), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("\"?\" at offset 6"), std::string::npos) << refused.status().message();
}

TEST_F(GrammarOnTokenizer, AutoToolChoiceLeavesTextFreeUntilTheOpenToken) {
  const Tokenizer& tok = test::FixtureTokenizer();
  auto g = compiler_->JsonSchema(R"({"type": "array", "items": {"type": "object"}, "minItems": 1, "maxItems": 1})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const OutputConstraint c = ToolCallConstraint(*g, /*must_open=*/false);
  const int32_t stop = 200020;
  ConstraintState st(c, std::span(&stop, 1));
  std::vector<float> logits(static_cast<size_t>(compiler_->rows()));
  auto allowed = [&] {
    std::fill(logits.begin(), logits.end(), 0.0f);
    st.Mask(logits);
    int64_t n = 0;
    for (float x : logits) n += x == 0.0f;
    return n;
  };
  auto text = tok.Encode("Let me check [that].");
  ASSERT_TRUE(text.ok());
  for (int32_t id : *text) {
    EXPECT_EQ(allowed(), compiler_->rows()) << "free text is not masked";
    ASSERT_TRUE(st.Accept(id).ok());
  }
  ASSERT_TRUE(st.Accept(200025).ok());
  EXPECT_LT(allowed(), 100) << "after <|tool_call|> only the array's opening may follow";
  auto call = tok.Encode(R"([{"a": 1}])");
  ASSERT_TRUE(call.ok());
  for (int32_t id : *call) ASSERT_TRUE(st.Accept(id).ok()) << tok.TokenBytes(id);
  EXPECT_EQ(allowed(), 1) << "then only the close tag";
  EXPECT_EQ(logits[200026], 0.0f);
  ASSERT_TRUE(st.Accept(200026).ok());
  EXPECT_EQ(allowed(), compiler_->rows()) << "free again after the close tag";
  // A token the grammar refuses is an internal error, not a silent pass.
  ASSERT_TRUE(st.Accept(200025).ok());
  EXPECT_FALSE(st.Accept((*text)[0]).ok());
}

}  // namespace
}  // namespace phi4mm
