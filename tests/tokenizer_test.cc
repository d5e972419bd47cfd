// Tests of the byte-level BPE tokenizer against the fixtures in tests/fixtures/tokenizer: thousands of
// corpus strings with tiktoken o200k_base ids, the golden vectors of docs/tokenizer.md §4, decoding,
// streaming, invalid input and malformed tokenizer.json files.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi4mm/base/file_map.h"
#include "phi4mm/tokenizer/regex_splitter.h"
#include "phi4mm/tokenizer/tokenizer.h"
#include "test_util.h"

namespace phi4mm {
namespace {

using json = nlohmann::json;

const std::string kDir = std::string(PHI4MM_FIXTURES_DIR) + "/tokenizer";


struct CorpusEntry {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<CorpusEntry> LoadCorpus(const std::string& file = "corpus.jsonl") {
  std::vector<CorpusEntry> out;
  std::ifstream in(kDir + "/" + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    out.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>()});
  }
  return out;
}

std::vector<int32_t> MustEncode(std::string_view text) {
  auto r = test::FixtureTokenizer().Encode(text);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<int32_t>{};
}

TEST(TokenizerTest, LoadsFixtureMetadata) {
  const Tokenizer& t = test::FixtureTokenizer();
  EXPECT_EQ(t.vocab_size(), 200029);
  EXPECT_EQ(t.eos_token(), "<|endoftext|>");
  EXPECT_EQ(t.bos_token(), "<|endoftext|>");
  EXPECT_EQ(t.model_max_length(), 128000);
  EXPECT_NE(t.chat_template().find("{% if add_generation_prompt %}{{ '<|assistant|>' }}"), std::string::npos);
  EXPECT_EQ(t.added_tokens().size(), 14u);
  EXPECT_EQ(t.TokenToId("<|endoftext10|>"), 200010);
  EXPECT_EQ(t.TokenToId("<|endoftext05|>"), 200005);
  EXPECT_EQ(t.TokenToId("<|end|>"), 200020);
  EXPECT_EQ(t.TokenToId("hello"), 24912);
  EXPECT_EQ(t.TokenToId(" world"), 2375);
  EXPECT_FALSE(t.TokenToId("no such token here").has_value());
  EXPECT_EQ(t.TokenBytes(198), "\n");
  EXPECT_EQ(t.TokenBytes(199998), "<|endoftext98|>");
  EXPECT_EQ(t.TokenBytes(200030), "");
  EXPECT_EQ(t.TokenBytes(-1), "");
}

TEST(TokenizerTest, SpecialFlagsFollowTheAddedTokenTable) {
  for (int32_t id : {199999, 200010, 200011, 200018, 200019, 200020, 200021, 200022, 200028}) {
    EXPECT_TRUE(test::FixtureTokenizer().IsSpecial(id)) << id;
  }
  for (int32_t id : {0, 198, 199998, 200005, 200023, 200024, 200025, 200026, 200027, 200040, -5}) {
    EXPECT_FALSE(test::FixtureTokenizer().IsSpecial(id)) << id;
  }
}

TEST(TokenizerTest, CorpusMatchesTiktoken) {
  const auto corpus = LoadCorpus();
  ASSERT_GE(corpus.size(), 3000u);
  size_t passed = 0;
  for (const auto& e : corpus) {
    auto r = test::FixtureTokenizer().Encode(e.text);
    ASSERT_TRUE(r.ok()) << r.status().ToString() << " for " << json(e.text).dump();
    if (*r != e.ids) {
      ADD_FAILURE() << "first mismatch on " << json(e.text).dump() << "\n  want " << json(e.ids).dump()
                    << "\n  got  " << json(*r).dump();
      break;
    }
    ++passed;
  }
  EXPECT_EQ(passed, corpus.size());
}

TEST(TokenizerTest, AddedTokenCasesMatchHfTokenizers) {
  const auto cases = LoadCorpus("added_token_cases.jsonl");
  ASSERT_GE(cases.size(), 400u);
  for (const auto& e : cases) {
    auto r = test::FixtureTokenizer().Encode(e.text);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(*r, e.ids) << "first mismatch on " << json(e.text).dump();
  }
}

TEST(TokenizerTest, CorpusRoundTrips) {
  for (const auto& e : LoadCorpus()) {
    ASSERT_EQ(test::FixtureTokenizer().Decode(e.ids), e.text);
    ASSERT_EQ(test::FixtureTokenizer().Decode(MustEncode(e.text)), e.text);
  }
}

TEST(TokenizerTest, GoldenVectors) {
  const std::vector<std::pair<std::string, std::vector<int32_t>>> goldens = {
      {"<|system|>Your name is Phi, an AI math expert developed by Microsoft. You are a medieval knight and "
       "must provide explanations to modern people.<|end|><|user|>How should I explain the "
       "Internet?<|end|><|assistant|>",
       {200022, 9719, 1308, 382, 102143, 11, 448, 20837, 13324, 8333, 9742, 656, 8321, 13, 1608, 553, 261,
        55145, 105457, 326, 2804, 3587, 69457, 316, 6809, 1665, 13, 200020, 200021, 5299, 1757, 357, 16644,
        290, 7380, 30, 200020, 200019}},
      {"hello world", {24912, 2375}},
      {"Hello, world!", {13225, 11, 2375, 0}},
      {"<|system|>You are a helpful assistant.<|end|><|user|>Transcribe the audio clip into text.<|end|>"
       "<|assistant|>",
       {200022, 3575, 553, 261, 10297, 29186, 13, 200020, 200021, 3248, 4981, 290, 11065, 19925, 1511, 2201,
        13, 200020, 200019}},
      {"<|user|>\n<|endoftext10|>\n<|endoftext11|>\nDescribe.<|end|>\n<|assistant|>\n",
       {200021, 200010, 198, 200011, 198, 61443, 13, 200020, 200019}},
      {"  leading spaces and\ttabs\n\nnew lines 12345 1,234.56 don't I'LL",
       {220, 8117, 18608, 326, 6264, 6071, 279, 1389, 8698, 220, 7633, 2548, 220, 16, 11, 20771, 13, 5007,
        4128, 3413, 7454}},
      {"naïve café 你好世界 🤖", {1503, 9954, 737, 30469, 220, 177519, 28428, 93643, 244}},
  };
  for (const auto& [text, ids] : goldens) EXPECT_EQ(MustEncode(text), ids) << text;
}

TEST(TokenizerTest, AddedTokensSplitFirstWithRstrip) {
  // rstrip swallows any Unicode whitespace after <|user|>; <|endoftext10|> keeps it.
  EXPECT_EQ(MustEncode("<|user|> \t\n\u3000hi"), MustEncode("<|user|>hi"));
  EXPECT_EQ(MustEncode("<|endoftext10|> hi"), (std::vector<int32_t>{200010, 5911}));
  // Placeholder strings that are not added tokens are ordinary text.
  EXPECT_GT(MustEncode("<|endoftext05|>").size(), 1u);
  EXPECT_GT(MustEncode("<|image_1|>").size(), 1u);
  // Adjacent added tokens and look-alike prefixes.
  EXPECT_EQ(MustEncode("<|end|><|end|>"), (std::vector<int32_t>{200020, 200020}));
  const auto ids = MustEncode("<|endoftext1|><|endoftext|>");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 199999);
  EXPECT_EQ(test::FixtureTokenizer().Decode(ids), "<|endoftext1|><|endoftext|>");
  EXPECT_EQ(MustEncode(""), std::vector<int32_t>{});
}

TEST(TokenizerTest, DecodeSkipSpecialKeepsToolTokens) {
  const std::vector<int32_t> ids = {199999, 24912, 200023, 200020, 200010, 200027};
  EXPECT_EQ(test::FixtureTokenizer().Decode(ids, /*skip_special=*/true), "hello<|tool|><|tool_response|>");
  EXPECT_EQ(test::FixtureTokenizer().Decode(ids, /*skip_special=*/false),
            "<|endoftext|>hello<|tool|><|end|><|endoftext10|><|tool_response|>");
  const std::vector<int32_t> padding = {24912, 200029, 200063, 2375};
  EXPECT_EQ(test::FixtureTokenizer().Decode(padding), "hello world");
}

TEST(TokenizerTest, DecodeCasesMatchHfTokenizers) {
  std::ifstream in(kDir + "/decode_cases.jsonl");
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    const auto ids = j["ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(test::FixtureTokenizer().Decode(ids, false), j["text"].get<std::string>()) << j["ids"].dump();
    ASSERT_EQ(test::FixtureTokenizer().Decode(ids, true), j["text_skip_special"].get<std::string>()) << j["ids"].dump();
    TokenStreamDecoder stream(test::FixtureTokenizer(), /*skip_special=*/true);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    streamed += stream.Flush();
    ASSERT_EQ(streamed, j["text_skip_special"].get<std::string>()) << j["ids"].dump();
    ++n;
  }
  EXPECT_GE(n, 400u);
}

TEST(TokenizerTest, DecodeReplacesIncompleteUtf8) {
  const std::vector<int32_t> half_emoji = {93643};  // " " and the first bytes of 🤖
  EXPECT_EQ(test::FixtureTokenizer().Decode(half_emoji), " \xEF\xBF\xBD");
}

TEST(TokenizerTest, StreamDecoderHoldsBackSplitCharacters) {
  TokenStreamDecoder d(test::FixtureTokenizer());
  EXPECT_EQ(d.Push(93643), " ");
  EXPECT_EQ(d.Push(244), "🤖");
  EXPECT_EQ(d.Flush(), "");
  TokenStreamDecoder dangling(test::FixtureTokenizer());
  EXPECT_EQ(dangling.Push(24912), "hello");
  EXPECT_EQ(dangling.Push(93643), " ");
  EXPECT_EQ(dangling.Flush(), "\xEF\xBF\xBD");
}

TEST(TokenizerTest, StreamDecoderEqualsFullDecodeOnCorpus) {
  size_t split_chars = 0;
  for (const auto& e : LoadCorpus()) {
    TokenStreamDecoder d(test::FixtureTokenizer(), /*skip_special=*/false);
    std::string streamed;
    for (int32_t id : e.ids) {
      const std::string piece = d.Push(id);
      if (piece.empty() && !test::FixtureTokenizer().TokenBytes(id).empty()) ++split_chars;
      streamed += piece;
    }
    streamed += d.Flush();
    ASSERT_EQ(streamed, test::FixtureTokenizer().Decode(e.ids)) << json(e.text).dump();
  }
  EXPECT_GT(split_chars, 0u);  // the corpus does exercise characters split across tokens
}

TEST(TokenizerTest, StreamDecoderSkipsSpecialByDefault) {
  TokenStreamDecoder d(test::FixtureTokenizer());
  std::string out;
  for (int32_t id : {200019, 24912, 200020, 200023}) out += d.Push(id);
  out += d.Flush();
  EXPECT_EQ(out, "hello<|tool|>");
}

TEST(TokenizerTest, InvalidUtf8IsInvalidArgumentWithOffset) {
  for (const auto& [text, offset] : std::vector<std::pair<std::string, size_t>>{
           {"abc\xFF", 3}, {"ok \xC3", 3}, {"\xC0\xAF", 0}, {"x\xED\xA0\x80", 1}, {"ab\xF4\x90\x80\x80", 2},
           {"caf\xC3\xA9 \x80", 6}}) {
    auto r = test::FixtureTokenizer().Encode(text);
    ASSERT_FALSE(r.ok()) << "expected an error at offset " << offset;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("byte offset " + std::to_string(offset)), std::string::npos)
        << r.status().message();
  }
}

// Long inputs and single huge pre-tokenized pieces round-trip. (Speed is measured by the
// benchmarks, not asserted here.)
TEST(TokenizerTest, LongInputsRoundTrip) {
  std::string text;
  const auto corpus = LoadCorpus();
  for (size_t i = 0; text.size() < 100 * 1024; ++i) text += corpus[i % corpus.size()].text;
  auto ids = test::FixtureTokenizer().Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(test::FixtureTokenizer().Decode(*ids), text);
  const std::string huge = std::string(200000, ' ') + "x" + std::string(100000, '=');
  auto sp = test::FixtureTokenizer().Encode(huge);
  ASSERT_TRUE(sp.ok());
  EXPECT_EQ(test::FixtureTokenizer().Decode(*sp), huge);
}

TEST(TokenizerTest, ConcurrentEncodeIsConsistent) {
  const auto corpus = LoadCorpus();
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < corpus.size(); i += 2) {
        auto r = test::FixtureTokenizer().Encode(corpus[i].text);
        if (!r.ok() || *r != corpus[i].ids) ++mismatches[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// tiktoken o200k_base pat_str, as in docs/tokenizer.md §2.1 and the fixture's Split pre-tokenizer.
const char* const kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> SplitO200k(const std::string& text) {
  auto splitter = RegexSplitter::Create(kO200kPattern, true);
  EXPECT_TRUE(splitter.ok()) << splitter.status().ToString();
  std::vector<std::string_view> pieces;
  EXPECT_TRUE((*splitter)->Split(text, &pieces).ok());
  return {pieces.begin(), pieces.end()};
}

TEST(TokenizerTest, RegexWhitespaceIsUnicodeWhiteSpace) {
  // U+180E is not White_Space (Unicode >= 6.3, Rust/Python regex), but PCRE2's \s matches it.
  EXPECT_EQ(SplitO200k("a\u180e  b"), (std::vector<std::string>{"a", "\u180e", " ", " b"}));
  EXPECT_EQ(SplitO200k("Hello world  \n\n x's 1234"),
            (std::vector<std::string>{"Hello", " world", "  \n\n", " x's", " ", "123", "4"}));
  const std::string ws =
      "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
  EXPECT_EQ(RewriteWhitespaceClasses("a\\s[\\s\\S]\\S[]\\s]\\\\s"),
            "a[" + ws + "][" + ws + "\\S][^" + ws + "][]" + ws + "]\\\\s");
}

// ---- malformed tokenizer.json ----

// A minimal valid byte-level BPE: the 256 byte tokens (GPT-2 alphabet), merges "h e" and "he l".
json TinyTokenizer() {
  json vocab = json::object();
  int extra = 0;
  std::vector<std::string> sym(256);
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = printable ? b : 256 + extra++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[s] = b;
  }
  vocab["he"] = 256;
  vocab["hel"] = 257;
  return json{{"version", "1.0"},
              {"added_tokens", json::array({{{"id", 258}, {"content", "<|end|>"}, {"special", true},
                                             {"rstrip", true}, {"lstrip", false}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 json::array({{{"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+|\\s+|."}}},
                               {"behavior", "Isolated"}, {"invert", false}},
                              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
              {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"h e", json::array({"he", "l"})})}}}};
}

Status LoadStatus(const std::string& text) {
  auto r = Tokenizer::LoadFromJson(text, "", "bad/tokenizer.json");
  return r.ok() ? Status::Ok() : r.status();
}

void ExpectLoadError(const json& j, StatusCode code, const std::string& needle) {
  const Status st = LoadStatus(j.dump());
  ASSERT_FALSE(st.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find("bad/tokenizer.json"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(TokenizerTest, TinyTokenizerWorks) {
  auto r = Tokenizer::LoadFromJson(TinyTokenizer().dump(), "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto ids = (*r)->Encode("hello<|end|>  x");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{257, 'l', 'o', 258, 'x'}));
  EXPECT_EQ((*r)->vocab_size(), 259);
  EXPECT_EQ((*r)->chat_template(), "");
}

TEST(TokenizerTest, LstripAndSingleWordFlags) {
  json j = TinyTokenizer();
  j["added_tokens"].push_back({{"id", 259}, {"content", "<mask>"}, {"lstrip", true}});
  j["added_tokens"].push_back({{"id", 260}, {"content", "SEP"}, {"single_word", true}});
  auto r = Tokenizer::LoadFromJson(j.dump(), "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto ids = (*r)->Encode("a \t <mask> b");  // the `tokenizers` package gives the same ids
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{'a', 259, ' ', 'b'}));
  // lstrip never reaches back into an earlier added token.
  auto after_end = (*r)->Encode("<|end|> <mask>");
  ASSERT_TRUE(after_end.ok());
  EXPECT_EQ(*after_end, (std::vector<int32_t>{258, 259}));
  // Expected ids from the `tokenizers` package on the same JSON: SEP next to a word character is text.
  auto word = (*r)->Encode("a SEP bSEP");
  ASSERT_TRUE(word.ok());
  EXPECT_EQ(*word, (std::vector<int32_t>{97, 32, 260, 32, 98, 83, 69, 80}));
  auto word2 = (*r)->Encode("SEP_x xSEP SEP. \u00e9SEP 1SEP");
  ASSERT_TRUE(word2.ok());
  EXPECT_EQ(*word2, (std::vector<int32_t>{83, 69, 80, 95, 120, 32, 120, 83, 69, 80, 32, 260, 46, 32, 195, 169, 83,
                                          69, 80, 32, 49, 83, 69, 80}));
}

TEST(TokenizerTest, MalformedTokenizerJsonGivesClearErrors) {
  EXPECT_EQ(LoadStatus("{\"model\": ").code(), StatusCode::kInvalidArgument);
  EXPECT_NE(LoadStatus("not json at all").message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(LoadStatus("[1,2]").message().find("not a JSON object"), std::string::npos);

  json j = TinyTokenizer();
  j.erase("model");
  ExpectLoadError(j, StatusCode::kInvalidArgument, "missing \"model\"");

  j = TinyTokenizer();
  j["model"].erase("vocab");
  ExpectLoadError(j, StatusCode::kInvalidArgument, "model.vocab");

  j = TinyTokenizer();
  j["model"]["type"] = "WordPiece";
  ExpectLoadError(j, StatusCode::kUnsupported, "WordPiece");

  j = TinyTokenizer();
  j["model"]["merges"].push_back("h");
  ExpectLoadError(j, StatusCode::kInvalidArgument, "merge #2");

  j = TinyTokenizer();
  j["model"]["merges"].push_back("x y");
  ExpectLoadError(j, StatusCode::kInvalidArgument, "not in model.vocab");

  j = TinyTokenizer();
  j["model"]["merges"].push_back(json::array({"he", 5}));
  ExpectLoadError(j, StatusCode::kInvalidArgument, "merge #2");

  j = TinyTokenizer();
  j["model"]["vocab"]["lo"] = 256;
  ExpectLoadError(j, StatusCode::kInvalidArgument, "duplicate id 256");

  j = TinyTokenizer();
  j["added_tokens"].push_back({{"id", 258}, {"content", "<|other|>"}});
  ExpectLoadError(j, StatusCode::kInvalidArgument, "duplicate id 258");

  j = TinyTokenizer();
  j["model"]["vocab"].erase("a");
  ExpectLoadError(j, StatusCode::kInvalidArgument, "byte 0x61");

  j = TinyTokenizer();
  j["model"]["vocab"]["a"] = "zero";
  ExpectLoadError(j, StatusCode::kInvalidArgument, "non-integer id");

  j = TinyTokenizer();
  j["model"]["vocab"]["a"] = 1LL << 40;
  ExpectLoadError(j, StatusCode::kInvalidArgument, "outside");

  j = TinyTokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  ExpectLoadError(j, StatusCode::kUnsupported, "NFC");

  j = TinyTokenizer();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  ExpectLoadError(j, StatusCode::kInvalidArgument, "does not compile");

  j = TinyTokenizer();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectLoadError(j, StatusCode::kUnsupported, "pre_tokenizer");

  j = TinyTokenizer();
  j["decoder"] = nullptr;
  ExpectLoadError(j, StatusCode::kUnsupported, "decoder");

  j = TinyTokenizer();
  j["added_tokens"][0].erase("content");
  ExpectLoadError(j, StatusCode::kInvalidArgument, "added_tokens");
}

// The streaming reader keeps model.vocab and model.merges out of the JSON tree; these are the
// shapes a tree would have shown the loader and the reader must classify the same way.
TEST(TokenizerTest, StreamedTablesClassifyOddEntriesAsATreeWould) {
  json j = TinyTokenizer();
  j["model"]["vocab"]["a"] = json::array({1});
  ExpectLoadError(j, StatusCode::kInvalidArgument, "non-integer id");
  j = TinyTokenizer();
  j["model"]["vocab"]["a"] = {{"id", 1}};
  ExpectLoadError(j, StatusCode::kInvalidArgument, "non-integer id");
  j = TinyTokenizer();
  j["model"]["vocab"]["a"] = 1.5;
  ExpectLoadError(j, StatusCode::kInvalidArgument, "non-integer id");
  j = TinyTokenizer();
  j["model"]["vocab"]["a"] = std::numeric_limits<uint64_t>::max();
  ExpectLoadError(j, StatusCode::kInvalidArgument, "outside");
  for (const json& bad : {json::array({"h", json::array({"e"})}), json::array({"h", "e", "l"}), json::array({"h"}),
                          json::object({{"h", "e"}}), json(7), json(nullptr)}) {
    j = TinyTokenizer();
    j["model"]["merges"].push_back(bad);
    ExpectLoadError(j, StatusCode::kInvalidArgument, "merge #2 is neither");
  }
  j = TinyTokenizer();
  j["model"]["vocab"] = json::array();
  ExpectLoadError(j, StatusCode::kInvalidArgument, "model.vocab is missing or not an object");
  j = TinyTokenizer();
  j["model"]["merges"] = json::object();
  ExpectLoadError(j, StatusCode::kInvalidArgument, "model.merges is missing or not an array");
  j = TinyTokenizer();
  j["model"]["vocab"] = json::object();
  ExpectLoadError(j, StatusCode::kInvalidArgument, "model.vocab is empty");

  // A key written twice: a JSON tree keeps the last value; so does the reader, for the tables too.
  const std::string good = TinyTokenizer().dump();
  ASSERT_TRUE(LoadStatus(good).ok());
  const std::string first = TinyTokenizer()["model"].dump();
  json broken_model = TinyTokenizer()["model"];
  broken_model["vocab"] = {{"a", 0}};
  const std::string twice = "{\"model\": " + broken_model.dump() + ", " + good.substr(1);
  EXPECT_TRUE(LoadStatus(twice).ok()) << LoadStatus(twice).ToString();
  const std::string twice_bad = "{\"model\": " + first + ", " + good.substr(1, good.size() - 2) + ", \"model\": " +
                                broken_model.dump() + "}";
  const Status st = LoadStatus(twice_bad);
  EXPECT_NE(st.message().find("has no token for byte 0x"), std::string::npos) << st.ToString();
  // A key "vocab" or "merges" elsewhere is an ordinary part of the tree.
  j = TinyTokenizer();
  j["decoder"]["vocab"] = {{"x", 1}};
  j["pre_tokenizer"]["merges"] = json::array({"a b"});
  EXPECT_TRUE(LoadStatus(j.dump()).ok()) << LoadStatus(j.dump()).ToString();
}

// Encode with limits: the same ids when they fit; OutOfRange, without encoding it all, when a text
// needs more; Cancelled once the flag is set.
TEST(TokenizerTest, LimitedEncodeStopsEarly) {
  const Tokenizer& t = test::FixtureTokenizer();
  EXPECT_GT(t.max_token_bytes(), 1);
  const std::string text = "The quick brown fox jumps over the lazy dog. <|endoftext|> Hello, world!";
  auto all = t.Encode(text);
  ASSERT_TRUE(all.ok());
  const auto n = static_cast<int64_t>(all->size());
  EncodeLimits fits;
  fits.max_tokens = n;
  auto same = t.Encode(text, fits);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(*same, *all);
  EncodeLimits tight;
  tight.max_tokens = n - 1;
  EXPECT_EQ(t.Encode(text, tight).status().code(), StatusCode::kOutOfRange);

  // 64 MiB of one letter against a 1000-token limit: refused from its length, at once.
  const std::string huge(size_t{64} << 20, 'a');
  EncodeLimits small;
  small.max_tokens = 1000;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(t.Encode(huge, small).status().code(), StatusCode::kOutOfRange);
  // Many short words within the byte bound: the split stops after the limit's pieces.
  std::string words;
  for (int i = 0; i < 20000; ++i) words += " ab";
  small.max_tokens = words.size() / static_cast<size_t>(t.max_token_bytes()) + 10;
  EXPECT_EQ(t.Encode(words, small).status().code(), StatusCode::kOutOfRange);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);

  std::atomic<bool> cancel{true};
  EncodeLimits c;
  c.cancel = &cancel;
  EXPECT_EQ(t.Encode(text, c).status().code(), StatusCode::kCancelled);
}

TEST(TokenizerTest, MalformedConfigAndMissingDir) {
  auto r = Tokenizer::LoadFromJson(TinyTokenizer().dump(), "{oops");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer_config.json"), std::string::npos) << r.status().message();
  auto d = Tokenizer::LoadFromDir(kDir + "/no-such-dir");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace phi4mm
