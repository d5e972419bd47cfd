// The server's pieces without HTTP or a model: strict base64, the OpenAI -> EngineRequest mapping
// (prompt rendering, placeholders numbered over the conversation, tools in the system turn,
// detail -> dynamic-HD, generation fields), lenient parsing of Phi-4 tool calls in the forms the
// model is known to produce, and the content / tool-call split of a streamed answer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/answer_builder.h"
#include "server/http/multipart.h"
#include "server/json_fields.h"
#include "server/media_input.h"
#include "server/request.h"
#include "server/tool_calls.h"

namespace phi4mm::server {
namespace {

using Json = nlohmann::ordered_json;

TEST(ServerBase64, RoundTripsAndRejectsBadInput) {
  std::string out;
  const std::vector<std::string> cases = {"", "f", "fo", "foo", "foob", "fooba", "foobar", std::string("\0\xff\x10", 3)};
  for (const std::string& s : cases) {
    ASSERT_TRUE(Base64Decode(Base64Encode(s), &out)) << s;
    EXPECT_EQ(out, s);
  }
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  ASSERT_TRUE(Base64Decode("Zm9vYg", &out));  // padding optional
  EXPECT_EQ(out, "foob");
  // As Python's decoders take it: MIME line breaks and spaces skipped, the URL-safe alphabet.
  ASSERT_TRUE(Base64Decode("Zm9v\r\nYmFy\n", &out));
  EXPECT_EQ(out, "foobar");
  ASSERT_TRUE(Base64Decode("Zm9v YmFy", &out));
  EXPECT_EQ(out, "foobar");
  ASSERT_TRUE(Base64Decode("_-8=", &out));  // "/+8=" in the standard alphabet
  EXPECT_EQ(out, std::string("\xff\xef", 2));
  EXPECT_FALSE(Base64Decode("Zm9vY", &out));
  EXPECT_FALSE(Base64Decode("Zm9vYmFy===", &out));
  EXPECT_FALSE(Base64Decode("Zm=vYmFy", &out));
  EXPECT_FALSE(Base64Decode("Zm9vYmF*", &out));
  EXPECT_FALSE(Base64Decode("Zm9vYg=", &out));  // padding that does not complete a quantum
}

ParsedRequest MustParse(const Json& body, const ServerLimits& limits = {}) {
  ParsedRequest p;
  ApiError e = ParseChatRequest(body, limits, ModelFacts{}, &p);
  EXPECT_TRUE(e.ok()) << e.param << ": " << e.message;
  return p;
}

TEST(ServerRequest, RendersTheChatTemplateWithPlaceholdersOverTheConversation) {
  const Json img = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}};
  const Json aud = {{"type", "input_audio"}, {"input_audio", {{"data", "AAAA"}, {"format", "wav"}}}};
  Json body = {{"messages",
                {{{"role", "developer"}, {"content", "Be brief."}},
                 {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "What"}}, img, {{"type", "text"}, {"text", "is it?"}}}}},
                 {{"role", "assistant"}, {"content", "A cat."}},
                 {{"role", "user"}, {"content", {aud, img}}}}}};
  ParsedRequest p = MustParse(body);
  EXPECT_EQ(p.engine.prompt,
            "<|system|>Be brief.<|end|><|user|><|image_1|>\nWhat\nis it?<|end|><|assistant|>A cat.<|end|>"
            "<|user|><|image_2|>\n<|audio_1|>\n<|end|><|assistant|>");
  // Collected in order, decoded later (media_admission.h).
  ASSERT_EQ(p.media_sources.size(), 3u);
  EXPECT_EQ(p.media_sources[0].kind, MediaSource::kImage);
  EXPECT_EQ(p.media_sources[1].kind, MediaSource::kAudio);
  EXPECT_EQ(p.media_sources[2].kind, MediaSource::kImage);
  EXPECT_TRUE(p.engine.media.empty());
  EXPECT_EQ(p.engine.generate.max_new_tokens, 2048);
  EXPECT_EQ(p.engine.generate.sampling.temperature, 0.0f);
  EXPECT_FALSE(p.stream);
}

TEST(ServerRequest, ToolsGoIntoTheSystemTurnAndCallsIntoTheHistory) {
  Json tools = Json::array({{{"type", "function"},
                             {"function", {{"name", "get_weather"}, {"description", "Weather"}, {"parameters", {{"type", "object"}}}}}}});
  Json body = {{"messages",
                {{{"role", "user"}, {"content", "Paris?"}},
                 {{"role", "assistant"},
                  {"content", nullptr},
                  {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                   {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
                 {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "22 C"}}}},
               {"tools", tools}};
  ParsedRequest p = MustParse(body);
  EXPECT_TRUE(p.tools);
  EXPECT_EQ(p.engine.prompt,
            "<|system|>You are a helpful assistant with some tools.<|tool|>[{\"name\": \"get_weather\", "
            "\"description\": \"Weather\", \"parameters\": {\"type\": \"object\"}}]<|/tool|><|end|>"
            "<|user|>Paris?<|end|><|assistant|><|tool_call|>[{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}}]<|/tool_call|><|end|><|tool|>22 C<|end|><|assistant|>");
  body["tool_choice"] = "none";
  EXPECT_FALSE(MustParse(body).tools);
}

// The tool schema reaches the prompt in the order the client wrote it (as the model card's
// json.dumps does), parsed from the raw body text.
TEST(ServerRequest, ToolSchemasKeepTheClientsKeyOrder) {
  const std::string raw =
      R"({"messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"f",)"
      R"("parameters":{"type":"object","required":["zeta"],"properties":{"zeta":{"type":"string"},)"
      R"("alpha":{"type":"integer"}}}}}]})";
  Json body;
  ASSERT_TRUE(ParseBody(raw, 64, &body).ok());
  ParsedRequest p = MustParse(body);
  EXPECT_NE(p.engine.prompt.find(R"("parameters": {"type": "object", "required": ["zeta"], "properties": {"zeta": )"
                                 R"({"type": "string"}, "alpha": {"type": "integer"}}})"),
            std::string::npos)
      << p.engine.prompt;
}

TEST(ServerRequest, DetailMapsToDynamicHd) {
  auto with_detail = [](const char* d) {
    Json iu = {{"url", "data:image/png;base64,AAAA"}};
    if (d) iu["detail"] = d;
    return Json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", iu}}}}}}}};
  };
  ServerLimits l;
  l.dynamic_hd = 4;
  l.max_dynamic_hd = 16;
  EXPECT_EQ(MustParse(with_detail("low"), l).dynamic_hd, 1);
  EXPECT_EQ(MustParse(with_detail(nullptr), l).dynamic_hd, 4);
  EXPECT_EQ(MustParse(with_detail("auto"), l).dynamic_hd, 4);
  EXPECT_EQ(MustParse(with_detail("high"), l).dynamic_hd, 16);
  Json ext = with_detail(nullptr);
  ext["dynamic_hd"] = 100;
  EXPECT_EQ(MustParse(ext, l).dynamic_hd, 16);  // clamped to --max-dynamic-hd
  ext["dynamic_hd"] = 2;
  EXPECT_EQ(MustParse(ext, l).engine.prompt_options.dynamic_hd, 2);
}

TEST(ServerRequest, GenerationFieldsReachTheEngine) {
  Json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
               {"max_completion_tokens", 7},
               {"max_tokens", 99},
               {"temperature", 0.7},
               {"top_p", 0.9},
               {"seed", 42},
               {"stop", "END"},
               {"frequency_penalty", 0.5},
               {"presence_penalty", -0.5},
               {"logit_bias", {{"123", -100}}},
               {"logprobs", true},
               {"top_logprobs", 2},
               {"top_k", 40},
               {"min_p", 0.05},
               {"repetition_penalty", 1.1},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  ParsedRequest p = MustParse(body);
  const GenerateOptions& g = p.engine.generate;
  EXPECT_EQ(g.max_new_tokens, 7);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_EQ(g.stop_strings, std::vector<std::string>{"END"});
  EXPECT_FLOAT_EQ(g.sampling.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.presence_penalty, -0.5f);
  ASSERT_EQ(g.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(g.sampling.logit_bias[0].first, 123);
  EXPECT_TRUE(g.sampling.logprobs);
  EXPECT_EQ(g.sampling.top_logprobs, 2);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_TRUE(p.ignored_fields.empty());
}

TEST(ServerRequest, LegacyCompletionsTakeARawPromptOrIds) {
  ParsedRequest p;
  ASSERT_TRUE(ParseCompletionRequest({{"prompt", "Hello"}}, {}, {}, &p).ok());
  EXPECT_EQ(p.engine.prompt, "Hello");
  EXPECT_EQ(p.engine.generate.max_new_tokens, 16);
  ParsedRequest q;
  ASSERT_TRUE(ParseCompletionRequest({{"prompt", {1, 2, 3}}}, {}, {}, &q).ok());
  EXPECT_EQ(q.engine.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  ParsedRequest r;
  EXPECT_EQ(ParseCompletionRequest({{"prompt", "x"}, {"echo", true}}, {}, {}, &r).param, "echo");
  EXPECT_EQ(ParseCompletionRequest({{"prompt", {{1}, 2}}}, {}, {}, &r).param, "prompt");
}

TEST(ServerToolCalls, ParsesTheFormsThePhiModelsProduce) {
  auto names = [](std::string_view text) {
    std::vector<std::string> out;
    for (const ToolCall& c : ParseToolCalls(text)) out.push_back(c.name + " " + c.arguments);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(R"([{"name": "f", "arguments": {"a": 1}}]<|/tool_call|>)"), V{R"(f {"a":1})"});
  EXPECT_EQ(names(R"(<|tool_call|>[{"name": "f", "arguments": {"a": [1, 2]}}])"), V{R"(f {"a":[1,2]})"});  // unclosed
  EXPECT_EQ(names(R"({"name": "f", "parameters": {"x": "]"}})"), V{R"(f {"x":"]"})"});                   // bare, alias
  EXPECT_EQ(names(R"({"name": "f", "arguments": {}} {"name": "g", "arguments": "{\"b\":2}"})"),
            (V{"f {}", R"(g {"b":2})"}));  // several objects, string arguments
  EXPECT_EQ(names(R"([{"name": "f"}, {"description": "no name"}, 5])"), V{"f {}"});
  EXPECT_TRUE(names("I think the weather is nice").empty());
  EXPECT_TRUE(names(R"([{"name": "f", "arguments": {"a": )").empty());  // cut off mid-call
  const auto calls = ParseToolCalls(R"([{"name":"f","arguments":{}}])");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].id.size(), 5u + 24u);
  EXPECT_EQ(calls[0].id.rfind("call_", 0), 0u);
}

TEST(ServerAnswerBuilder, SplitsContentFromToolCalls) {
  AnswerBuilder a(/*tools=*/true);
  EXPECT_EQ(a.Push("Let me check. ", 100), "Let me check. ");
  EXPECT_EQ(a.Push("<|tool_call|>", kToolCallTokenId), "");
  EXPECT_EQ(a.Push(R"([{"name": "get_weather", "arguments": {"city": "Paris"}}])", 101), "");
  EXPECT_EQ(a.Push("<|/tool_call|>", 200026), "");
  EXPECT_EQ(a.Finish(), "");
  ASSERT_EQ(a.calls().size(), 1u);
  EXPECT_EQ(a.calls()[0].name, "get_weather");
  EXPECT_EQ(a.calls()[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(a.content(), "Let me check. ");

  AnswerBuilder bad(true);
  bad.Push("<|tool_call|>", kToolCallTokenId);
  bad.Push("not json", 5);
  EXPECT_EQ(bad.Finish(), "<|tool_call|>not json");
  EXPECT_TRUE(bad.calls().empty());

  AnswerBuilder off(false);  // no tools in the request: the marker is plain text
  EXPECT_EQ(off.Push("<|tool_call|>", kToolCallTokenId), "<|tool_call|>");
  EXPECT_EQ(off.Finish(), "");
  EXPECT_TRUE(off.calls().empty());
}

TEST(ServerJson, DepthLimitAndObjectRequired) {
  Json j;
  EXPECT_TRUE(ParseBody(R"({"a":[{"b":"[[[[["}]})", 4, &j).ok());  // brackets inside strings do not count
  EXPECT_FALSE(ParseBody(R"({"a":[[[[1]]]]})", 4, &j).ok());
  EXPECT_EQ(ParseBody("null", 4, &j).code, "invalid_json");
}

}  // namespace
}  // namespace phi4mm::server

namespace phi4mm::server {
namespace {

TEST(ServerMultipart, PartsNamesFilesAndErrors) {
  const std::string body =
      "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\".wav\"\r\n"
      "Content-Type: audio/wav\r\n\r\nRIFF\r\n--not-the-end\r\n--XyZ\r\ncontent-disposition: form-data; name=model\r\n\r\n"
      "whisper-1\r\n--XyZ--\r\nepilogue";
  auto parts = http::ParseMultipart(body, "multipart/form-data; charset=utf-8; boundary=XyZ");
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "file");
  EXPECT_EQ((*parts)[0].filename, "a \"b\".wav");
  EXPECT_EQ((*parts)[0].content_type, "audio/wav");
  EXPECT_EQ((*parts)[0].data, "RIFF\r\n--not-the-end");
  EXPECT_EQ(http::FindPart(*parts, "model")->data, "whisper-1");
  EXPECT_EQ(http::FindPart(*parts, "nope"), nullptr);
  // A quoted boundary; an empty part body.
  auto quoted = http::ParseMultipart("--a b\r\nContent-Disposition: form-data; name=x\r\n\r\n\r\n--a b--",
                                     "Multipart/Form-Data; boundary=\"a b\"");
  ASSERT_TRUE(quoted.ok()) << quoted.status().ToString();
  EXPECT_EQ((*quoted)[0].data, "");
  const std::string type = "multipart/form-data; boundary=B";
  EXPECT_FALSE(http::ParseMultipart("--B\r\nContent-Disposition: form-data; name=x\r\n\r\nno end", type).ok());
  EXPECT_FALSE(http::ParseMultipart("--B\r\nContent-Type: a/b\r\n\r\nx\r\n--B--", type).ok());  // no disposition
  EXPECT_FALSE(http::ParseMultipart("--B\r\nContent-Disposition: attachment; name=x\r\n\r\nx\r\n--B--", type).ok());
  EXPECT_FALSE(http::ParseMultipart("no boundary here", type).ok());
  EXPECT_FALSE(http::ParseMultipart("--B--", "multipart/form-data").ok());  // no boundary parameter
  EXPECT_FALSE(http::ParseMultipart("--B--", "application/json").ok());
  std::string many;
  for (int i = 0; i < 5; ++i) many += "--B\r\nContent-Disposition: form-data; name=p\r\n\r\nv\r\n";
  many += "--B--";
  EXPECT_TRUE(http::ParseMultipart(many, type, 5).ok());
  EXPECT_FALSE(http::ParseMultipart(many, type, 4).ok());
  EXPECT_EQ(http::PercentDecode("a%20b%2Fc%zz%4"), "a b/c%zz%4");
}

}  // namespace
}  // namespace phi4mm::server
