// `phi4mm serve` end to end on the tiny fixture model, in-process on a loopback port, over HTTP:
// chat completions (non-streaming and SSE, with the exact chunk sequence), every modality mix with
// greedy answers equal to `phi4mm run`'s, multi-turn media-cache hits in /metrics, detail ->
// dynamic-HD as input_tokens predicts, logprobs, legacy completions, transcriptions, models,
// health and metrics.
#include <cstdio>

#include "phi4mm/tokenizer/chat_format.h"
#include "server_test_util.h"

namespace phi4mm::test {
namespace {

TestServer& Shared() {
  static TestServer* s = new TestServer(StartTestServer());
  return *s;
}

// `phi4mm run`'s stdout (answer + "\n") for the same greedy request.
std::string RunCliAnswer(const std::string& prompt, const std::vector<std::string>& images,
                         const std::vector<std::string>& audios, int max_tokens) {
  std::string cmd = std::string("'") + PHI4MM_CLI_PATH + "' run -m '" + FixturePath("tiny/orig") + "' -p '" + prompt +
                    "' -n " + std::to_string(max_tokens);
  for (const auto& i : images) cmd += " --image '" + FixturePath(i) + "'";
  for (const auto& a : audios) cmd += " --audio '" + FixturePath(a) + "'";
  cmd += " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n = 0;
  while (p && (n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (p) {
    EXPECT_EQ(pclose(p), 0) << cmd;
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  // The CLI writes the answer's bytes as they are; JSON carries invalid UTF-8 (a random model's
  // stray byte tokens) as U+FFFD, so compare through the same replacement.
  return Json::parse(Json(out).dump(-1, ' ', false, Json::error_handler_t::replace)).get<std::string>();
}

Json UserParts(const std::string& text, const std::vector<std::string>& images, const std::vector<std::string>& audios) {
  Json parts = Json::array();
  for (const auto& i : images) parts.push_back({{"type", "image_url"}, {"image_url", {{"url", DataUri("image/png", i)}}}});
  for (const auto& a : audios) {
    const std::string ext = a.substr(a.rfind('.') + 1);
    parts.push_back({{"type", "input_audio"},
                     {"input_audio", {{"data", server::Base64Encode(ReadFile(FixturePath(a)))}, {"format", ext}}}});
  }
  parts.push_back({{"type", "text"}, {"text", text}});
  return {{"role", "user"}, {"content", parts}};
}

TEST(ServerApi, TextAnswerHasTheOpenAiShape) {
  auto r = Post(Shared().port, "/v1/chat/completions", ChatBody({TextMessage("Hello there")}, 6).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  const std::string fr = j["choices"][0]["finish_reason"];
  EXPECT_TRUE(fr == "stop" || fr == "length") << fr;
  const Json& u = j["usage"];
  EXPECT_GT(u["prompt_tokens"].get<int>(), 3);
  EXPECT_LE(u["completion_tokens"].get<int>(), 6);
  EXPECT_EQ(u["total_tokens"].get<int>(), u["prompt_tokens"].get<int>() + u["completion_tokens"].get<int>());
  EXPECT_EQ(u["prompt_tokens_details"]["image_tokens"], 0);
  EXPECT_FALSE(r.header("x-request-id").empty());
}

TEST(ServerApi, StreamSendsRoleDeltasFinishAndDone) {
  const Json body = ChatBody({TextMessage("Tell me a story")}, 8);
  auto plain = Post(Shared().port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(plain.status, 200) << plain.body;
  Json sb = body;
  sb["stream"] = true;
  auto r = Post(Shared().port, "/v1/chat/completions", sb.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.header("Content-Type").find("text/event-stream"), std::string::npos);
  const auto events = SseEvents(r.body);
  ASSERT_GE(events.size(), 3u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  const Json first = Json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "");
  EXPECT_FALSE(first.contains("usage"));
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json c = Json::parse(events[i]);
    EXPECT_EQ(c["id"], first["id"]);
    EXPECT_EQ(c["created"], first["created"]);
    const Json& d = c["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
    if (i + 2 < events.size()) {
      EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null()) << events[i];
    }
  }
  const Json last = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], plain.json()["choices"][0]["finish_reason"]);
  EXPECT_EQ(text, plain.json()["choices"][0]["message"]["content"].get<std::string>());
}

TEST(ServerApi, StreamUsageChunkComesLastWithEmptyChoices) {
  Json body = ChatBody({TextMessage("Count to three")}, 5);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = Post(Shared().port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const auto events = SseEvents(r.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["choices"], Json::array());
  EXPECT_GT(usage["usage"]["prompt_tokens"].get<int>(), 0);
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const Json c = Json::parse(events[i]);
    ASSERT_TRUE(c.contains("usage")) << events[i];
    EXPECT_TRUE(c["usage"].is_null());
  }
}

struct Mix {
  const char* name;
  std::vector<std::string> images, audios;
};

class ServerMatchesRun : public ::testing::TestWithParam<Mix> {};

TEST_P(ServerMatchesRun, GreedyAnswerEqualsPhi4mmRun) {
  const Mix& m = GetParam();
  const std::string prompt = "Describe what you get.";
  const int n = 8;
  auto r = Post(Shared().port, "/v1/chat/completions", ChatBody({UserParts(prompt, m.images, m.audios)}, n).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  const std::string want = RunCliAnswer(prompt, m.images, m.audios, n);
  EXPECT_EQ(j["choices"][0]["message"]["content"].get<std::string>(), want);
  int64_t image_tokens = j["usage"]["prompt_tokens_details"]["image_tokens"], audio_tokens = j["usage"]["prompt_tokens_details"]["audio_tokens"];
  EXPECT_EQ(image_tokens > 0, !m.images.empty());
  EXPECT_EQ(audio_tokens > 0, !m.audios.empty());
}

INSTANTIATE_TEST_SUITE_P(Modalities, ServerMatchesRun,
                         ::testing::Values(Mix{"text", {}, {}}, Mix{"image", {"images/tiny_5x7.png"}, {}},
                                           Mix{"audio", {}, {"audio/tone_1s_16k.wav"}},
                                           Mix{"image_audio", {"images/tiny_5x7.png"}, {"audio/silence_1s_16k.wav"}}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ServerApi, SecondTurnResendingTheImageDoesNotEncodeItAgain) {
  auto& s = Shared();
  // A one-crop image (481 of the tiny model's 512 positions) and short turns.
  std::vector<Json> turn1 = {UserParts("What?", {"images/tiny_5x7.png"}, {})};
  auto r1 = Post(s.port, "/v1/chat/completions", ChatBody(turn1, 2).dump());
  ASSERT_EQ(r1.status, 200) << r1.body;
  const std::string m1 = Get(s.port, "/metrics").body;
  const double encoded = MetricValue(m1, "phi4mm_images_encoded_total");
  ASSERT_GE(encoded, 1);
  std::vector<Json> turn2 = turn1;
  turn2.push_back({{"role", "assistant"}, {"content", r1.json()["choices"][0]["message"]["content"]}});
  turn2.push_back(TextMessage("Why?"));
  auto r2 = Post(s.port, "/v1/chat/completions", ChatBody(turn2, 2).dump());
  ASSERT_EQ(r2.status, 200) << r2.body;
  const std::string m2 = Get(s.port, "/metrics").body;
  // The second turn's prompt starts with the first one, image included: it comes from the prefix
  // cache (or, for rows past it, the media cache), and the vision encoder does not run again.
  EXPECT_EQ(MetricValue(m2, "phi4mm_images_encoded_total"), encoded);
  EXPECT_GT(r2.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            r2.json()["usage"]["prompt_tokens_details"]["image_tokens"].get<int>());
  EXPECT_GT(MetricValue(m2, "phi4mm_prefix_cache_hit_tokens_total"), MetricValue(m1, "phi4mm_prefix_cache_hit_tokens_total"));
}

TEST(ServerApi, DetailLowChangesPromptTokensAsInputTokensPredicts) {
  auto& s = Shared();
  auto body = [](const std::string& image, const std::string& detail) {
    Json img = {{"url", DataUri("image/png", image)}};
    if (!detail.empty()) img["detail"] = detail;
    Json msg = {{"role", "user"},
                {"content", Json::array({{{"type", "image_url"}, {"image_url", img}}, {{"type", "text"}, {"text", "What?"}}})}};
    return ChatBody({msg}, 1);
  };
  // A 640x480 photo: one crop at detail low, several at the checkpoint's 36.
  auto count_low = Post(s.port, "/v1/chat/completions/input_tokens", body("images/photo_640x480.png", "low").dump());
  auto count_auto = Post(s.port, "/v1/chat/completions/input_tokens", body("images/photo_640x480.png", "").dump());
  ASSERT_EQ(count_low.status, 200) << count_low.body;
  ASSERT_EQ(count_auto.status, 200) << count_auto.body;
  EXPECT_EQ(count_low.json()["object"], "response.input_tokens");
  EXPECT_EQ(count_low.json()["lora_mode"], "vision");
  EXPECT_EQ(count_low.json()["dynamic_hd"], 1);
  EXPECT_EQ(count_auto.json()["dynamic_hd"], 36);
  EXPECT_LT(count_low.json()["input_tokens"].get<int>(), count_auto.json()["input_tokens"].get<int>());
  EXPECT_EQ(count_low.json()["input_tokens"].get<int>(),
            count_low.json()["text_tokens"].get<int>() + count_low.json()["image_tokens"][0].get<int>());
  // The tiny model's 512-token context holds a one-crop image: what a run costs is what was counted.
  const Json small = body("images/tiny_5x7.png", "low");
  auto predicted = Post(s.port, "/v1/chat/completions/input_tokens", small.dump());
  auto run = Post(s.port, "/v1/chat/completions", small.dump());
  ASSERT_EQ(run.status, 200) << run.body;
  EXPECT_EQ(run.json()["usage"]["prompt_tokens"], predicted.json()["input_tokens"]);
  EXPECT_EQ(run.json()["usage"]["prompt_tokens_details"]["image_tokens"], predicted.json()["image_tokens"][0]);
  EXPECT_EQ(run.json()["usage"]["dynamic_hd"], 1);
  // Too long for the context: a clear 400 instead of an answer.
  auto too_long = Post(s.port, "/v1/chat/completions", body("images/photo_640x480.png", "").dump());
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.json()["error"]["code"], "context_length_exceeded") << too_long.body;
}

TEST(ServerApi, CurlFormContentTypeIsReadAsJson) {
  // `curl -d` sends application/x-www-form-urlencoded; a 20 KB JSON body must still be accepted.
  const std::string body = ChatBody({TextMessage("hi")}, 1).dump() + std::string(20000, ' ');
  auto r = Post(Shared().port, "/v1/chat/completions", body, {}, "application/x-www-form-urlencoded");
  EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
}

TEST(ServerApi, ToolsAreRenderedIntoTheSystemTurn) {
  auto& s = Shared();
  Json body = ChatBody({TextMessage("Weather in Paris?")}, 1);
  auto plain = Post(s.port, "/v1/chat/completions/input_tokens", body.dump());
  body["tools"] = Json::array({{{"type", "function"},
                                {"function",
                                 {{"name", "get_weather"},
                                  {"description", "Current weather"},
                                  {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  auto with_tools = Post(s.port, "/v1/chat/completions/input_tokens", body.dump());
  ASSERT_EQ(with_tools.status, 200) << with_tools.body;
  // The synthesised system turn and the <|tool|> block add tokens; tool_choice none removes them.
  EXPECT_GT(with_tools.json()["input_tokens"].get<int>(), plain.json()["input_tokens"].get<int>() + 20);
  body["tool_choice"] = "none";
  EXPECT_EQ(Post(s.port, "/v1/chat/completions/input_tokens", body.dump()).json()["input_tokens"],
            plain.json()["input_tokens"]);
  body["tool_choice"] = "auto";
  auto answer = Post(s.port, "/v1/chat/completions", body.dump());
  EXPECT_EQ(answer.status, 200) << answer.body;
}

TEST(ServerApi, LogprobsListEveryTokenWithItsAlternatives) {
  Json body = ChatBody({TextMessage("Hi")}, 4);
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  auto r = Post(Shared().port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  const Json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), j["usage"]["completion_tokens"].get<size_t>());
  for (const Json& e : content) {
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_NEAR(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>(), 1e-6);
    EXPECT_TRUE(e["bytes"].is_array());
  }
}

TEST(ServerApi, LegacyCompletionsStreamAndNot) {
  auto& s = Shared();
  Json body = {{"model", "tiny"}, {"prompt", "Once upon a time"}, {"max_tokens", 5}, {"temperature", 0}};
  auto r = Post(s.port, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["object"], "text_completion");
  const std::string text = r.json()["choices"][0]["text"];
  body["stream"] = true;
  auto st = Post(s.port, "/v1/completions", body.dump());
  ASSERT_EQ(st.status, 200);
  std::string streamed;
  const auto events = SseEvents(st.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) streamed += Json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text);
}

TEST(ServerApi, TranscriptionsTakeAMultipartFile) {
  httplib::Client cli("127.0.0.1", Shared().port);
  cli.set_read_timeout(120, 0);
  httplib::MultipartFormDataItems items = {
      {"file", ReadFile(FixturePath("audio/speech_16k_pcm16.wav")), "speech.wav", "audio/wav"},
      {"model", "whisper-1", "", ""},
      {"max_tokens", "6", "", ""}};
  auto r = cli.Post("/v1/audio/transcriptions", items);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json j = Json::parse(r->body);
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_GT(j["usage"]["prompt_tokens_details"]["audio_tokens"].get<int>(), 0);
  items.push_back({"response_format", "text", "", ""});
  auto t = cli.Post("/v1/audio/transcriptions", items);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 200);
  EXPECT_EQ(t->body, j["text"].get<std::string>());
  items.back().content = "srt";
  auto srt = cli.Post("/v1/audio/translations", items);
  ASSERT_TRUE(srt);
  EXPECT_EQ(srt->status, 400);
  EXPECT_EQ(Json::parse(srt->body)["error"]["param"], "response_format");
}

TEST(ServerApi, ModelsHealthAndMetrics) {
  auto& s = Shared();
  auto models = Get(s.port, "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["data"][0]["id"], "tiny");
  EXPECT_EQ(models.json()["data"][0]["max_model_len"], 512);
  EXPECT_EQ(Get(s.port, "/v1/models/tiny").status, 200);
  EXPECT_EQ(Get(s.port, "/v1/models/gpt-4").status, 404);
  auto health = Get(s.port, "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["status"], "ok");
  auto metrics = Get(s.port, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  for (const char* name : {"phi4mm_build_info{version=\"test\",quant=\"none\",kv_dtype=\"auto\"}", "phi4mm_requests_running",
                           "phi4mm_requests_waiting", "phi4mm_kv_cache_bytes", "phi4mm_generation_tokens_total",
                           "phi4mm_cancelled_total{reason=\"disconnect\"}", "process_resident_memory_bytes"})
    EXPECT_GE(MetricValue(metrics.body, name), 0) << name;
  EXPECT_NE(metrics.body.find("phi4mm_requests_total{endpoint=\"/health\",status=\"200\"}"), std::string::npos);
}

TEST(ServerApi, HealthIsUnavailableUntilTheModelIsLoaded) {
  server::ServerOptions so;
  so.port = 0;
  server::Server srv(so);
  auto port = srv.Start();
  ASSERT_TRUE(port.ok());
  auto h = Get(*port, "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.json()["error"]["message"], "Loading model");
  EXPECT_EQ(Post(*port, "/v1/chat/completions", ChatBody({TextMessage("x")}, 1).dump()).status, 503);
  srv.Stop();
}

}  // namespace
}  // namespace phi4mm::test
