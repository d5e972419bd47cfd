// `phi4mm serve` under bad and hostile input, on the tiny fixture model over loopback HTTP: every
// error status of the spec (400 naming the field, 401, 404, 405, 413, 429 with Retry-After, 503),
// malformed, truncated, oversized and deeply nested bodies, bad base64, undecodable and oversized
// media (rejected from their headers), wrong types at every level, and unsupported fields; plus
// cancellation when the client disconnects while decoding, while queued and before a
// non-streaming answer, and overload.
#include <cstring>
#include <thread>

#include "server_test_util.h"

namespace phi4mm::test {
namespace {

TestServer& Shared() {
  static TestServer* s = [] {
    server::ServerOptions so;
    so.limits.media.max_audio_seconds = 10;
    so.max_body_bytes = 4 << 20;
    return new TestServer(StartTestServer(so));
  }();
  return *s;
}

// Posts `body` (a JSON value or raw text) and expects a 400 whose error names `param`.
void Expect400(const std::string& body, const std::string& param, const std::string& message_part = "",
               const std::string& code = "") {
  auto r = Post(Shared().port, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 400) << body.substr(0, 300) << "\n-> " << r.body;
  const Json j = r.json();
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["message"].is_string());
  if (param.empty()) {
    EXPECT_TRUE(j["error"]["param"].is_null()) << r.body;
  } else {
    EXPECT_EQ(j["error"]["param"], param) << r.body;
  }
  if (!message_part.empty()) {
    EXPECT_NE(j["error"]["message"].get<std::string>().find(message_part), std::string::npos) << r.body;
  }
  if (!code.empty()) {
    EXPECT_EQ(j["error"]["code"], code) << r.body;
  }
}

Json WithPart(Json part) {
  return ChatBody({{{"role", "user"}, {"content", Json::array({std::move(part), {{"type", "text"}, {"text", "?"}}})}}}, 2);
}
Json ImagePart(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }
Json AudioPart(const std::string& data, const std::string& format) {
  return {{"type", "input_audio"}, {"input_audio", {{"data", data}, {"format", format}}}};
}

// A chat body whose answer never ends early: the EOS ids are banned with logit_bias.
Json LongBody(int max_tokens, bool stream) {
  Json b = ChatBody({TextMessage("Write a long poem about the sea.")}, max_tokens);
  b["logit_bias"] = {{"200020", -100}, {"199999", -100}};
  b["stream"] = stream;
  return b;
}

TEST(ServerErrors, MalformedBodies) {
  Expect400("{\"messages\": [", "", "not valid JSON", "invalid_json");
  Expect400("", "", "not valid JSON", "invalid_json");
  Expect400("[1,2,3]", "", "must be a JSON object", "invalid_json");
  Expect400("\"hello\"", "", "must be a JSON object");
  Expect400(std::string(100000, '[') + std::string(100000, ']'), "", "nests deeper");
  Expect400("{\"a\":" + std::string(5000, '{') + std::string(5000, '}') + "}", "", "nests deeper");
  Expect400(std::string("{\"messages\":\"\xff\xfe\"}"), "", "not valid JSON");
}

TEST(ServerErrors, WrongTypesNameTheField) {
  Expect400(R"({"model":"x"})", "messages", "non-empty array");
  Expect400(R"({"messages":"hi"})", "messages", "must be an array");
  Expect400(R"({"messages":[]})", "messages");
  Expect400(R"({"messages":[5]})", "messages[0]", "must be an object");
  Expect400(R"({"messages":[{"content":"x"}]})", "messages[0].role", "required");
  Expect400(R"({"messages":[{"role":7,"content":"x"}]})", "messages[0].role", "must be a string");
  Expect400(R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role", "unsupported role");
  Expect400(R"({"messages":[{"role":"user","content":5}]})", "messages[0].content", "string or an array");
  Expect400(R"({"messages":[{"role":"user"}]})", "messages[0].content", "required");
  Expect400(R"({"messages":[{"role":"user","content":[7]}]})", "messages[0].content[0]", "must be an object");
  Expect400(R"({"messages":[{"role":"user","content":[{"type":"video_url","video_url":{}}]}]})",
            "messages[0].content[0].type", "supported: text, image_url, input_audio, audio_url");
  Expect400(R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content[0].text", "required");
  Expect400(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":"x"}]}]})",
            "messages[0].content[0].image_url", "must be an object");
  Expect400(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
            "messages[0].content[0].image_url.url", "required");
  Expect400(R"({"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
            "messages[0].content[0].type", "user messages");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"ten"})", "max_tokens", "integer");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens", "between");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":100000})", "max_tokens", "between");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"temperature":5})", "temperature", "between 0 and 2");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature", "number");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream", "boolean");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop[0]", "string");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"stop":[""]})", "stop", "empty");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"abc":1}})", "logit_bias.abc", "token ids");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"5":500}})", "logit_bias.5", "-100 and 100");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"99999999":1}})", "logit_bias.99999999");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})", "top_logprobs", "logprobs: true");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":50})", "top_logprobs");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})", "tools[0].function", "required");
  Expect400(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":""}}]})",
            "tools[0].function.name");
  Expect400(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{}}]}]})",
            "messages[0].tool_calls[0].function.name", "required");
}

TEST(ServerErrors, UnsupportedFieldsAreRefusedNotIgnored) {
  const std::string base = R"({"messages":[{"role":"user","content":"x"}],)";
  Expect400(base + R"("n":17})", "n", "at most 16", "out_of_range");
  Expect400(base + R"("n":0})", "n");
  // Structured output is served (tests/python/test_structured.py); its malformed forms are 400s.
  Expect400(base + R"("response_format":{"type":"json_schema","json_schema":{}}})", "response_format.json_schema.name");
  Expect400(base + R"("response_format":{"type":"yaml"}})", "response_format.type", "not supported");
  Expect400(base + R"("response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"not":{}}}}})",
            "response_format.json_schema.schema", "#/not", "invalid_schema");
  Expect400(base + R"("tool_choice":"required"})", "tool_choice", "no tools");
  Expect400(base + R"("tool_choice":{"type":"function","function":{"name":"f"}}})", "tool_choice");
  Expect400(base + R"("tool_choice":{"type":"function","function":{"name":"g"}},"tools":[{"type":"function","function":{"name":"f"}}]})",
            "tool_choice.function.name", "not among the tools");
  Expect400(base + R"("modalities":["text","audio"]})", "modalities[1]", "text only");
  Expect400(base + R"("audio":{"voice":"alloy","format":"wav"}})", "audio");
  Expect400(base + R"("functions":[{"name":"f"}]})", "functions", "use tools");
  // Accepted fields that do not change the answer, nulls, and unknown extras (listed in a header).
  auto r = Post(Shared().port, "/v1/chat/completions",
                base + R"("user":"u1","store":false,"n":1,"stop":null,"metadata":{"a":"b"},"max_tokens":2,"my_extra":1})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-phi4mm-ignored-fields"), "my_extra");
}

TEST(ServerErrors, BadMediaAreClear400s) {
  const std::string p = "messages[0].content[0].image_url.url";
  Expect400(WithPart(ImagePart("data:image/png;base64,!!!notbase64!!!")).dump(), p, "base64", "invalid_base64");
  Expect400(WithPart(ImagePart("data:image/png;base64,")).dump(), p, "empty");
  Expect400(WithPart(ImagePart("data:text/plain;base64,aGVsbG8=")).dump(), p, "image/*");
  Expect400(WithPart(ImagePart("https://example.com/cat.png")).dump(), p, "not fetched", "remote_media_disabled");
  Expect400(WithPart(ImagePart("file:///etc/passwd")).dump(), p, "--media-dir");
  Expect400(WithPart(ImagePart("cat.png")).dump(), p);
  Expect400(WithPart(ImagePart("data:image/png;base64," + server::Base64Encode("not an image at all"))).dump(), p, "",
            "invalid_image");
  Expect400(WithPart(ImagePart(DataUri("image/png", "images/bad_truncated.png"))).dump(), p, "", "invalid_image");
  Expect400(WithPart(ImagePart(DataUri("image/jpeg", "images/bad_truncated.jpg"))).dump(), p, "", "invalid_image");
  // A decompression bomb's header (100000 x 100000) is refused before any pixel is decoded.
  Expect400(WithPart(ImagePart(DataUri("image/png", "images/bomb_100000x100000.png"))).dump(), p, "--max-image-pixels",
            "image_too_large");
  Expect400(WithPart(ImagePart(DataUri("image/bmp", "images/bomb_100000x100000.bmp"))).dump(), p, "", "image_too_large");
  Json detail = ImagePart(DataUri("image/png", "images/tiny_5x7.png"));
  detail["image_url"]["detail"] = "ultra";
  Expect400(WithPart(detail).dump(), "messages[0].content[0].image_url.detail", "low");

  const std::string a = "messages[0].content[0].input_audio";
  Expect400(WithPart(AudioPart("@@@", "wav")).dump(), a + ".data", "base64");
  Expect400(WithPart(AudioPart(server::Base64Encode("RIFF garbage"), "wav")).dump(), a + ".data", "", "invalid_audio");
  Expect400(WithPart(AudioPart(server::Base64Encode(ReadFile(FixturePath("audio/truncated.wav"))), "wav")).dump(),
            a + ".data", "truncated");
  Expect400(WithPart(AudioPart(server::Base64Encode(ReadFile(FixturePath("audio/nan_float.wav"))), "wav")).dump(),
            a + ".data", "NaN");
  Expect400(WithPart(AudioPart("AAAA", "amr")).dump(), a + ".format", "wav, mp3, flac or ogg", "unsupported_audio_format");
  // 45 s of FLAC against this server's --max-audio-seconds 10: refused from the header.
  Expect400(WithPart(AudioPart(server::Base64Encode(ReadFile(FixturePath("audio/long_45s_16k.flac"))), "flac")).dump(),
            a + ".data", "--max-audio-seconds", "audio_too_long");
  Json au = {{"type", "audio_url"}, {"audio_url", {{"url", "http://example.com/a.wav"}}}};
  Expect400(WithPart(au).dump(), "messages[0].content[0].audio_url.url", "", "remote_media_disabled");
  // A multi-hour WAV header over a few bytes of data: refused at once, never read as hours of audio.
  std::string wav = ReadFile(FixturePath("audio/tone_1s_16k.wav"));
  const uint32_t huge = 16000u * 2u * 3u * 3600u;  // 3 hours of 16-bit mono
  std::memcpy(wav.data() + 40, &huge, 4);
  auto t0 = std::chrono::steady_clock::now();
  auto r = Post(Shared().port, "/v1/chat/completions", WithPart(AudioPart(server::Base64Encode(wav), "wav")).dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(ServerErrors, TooManyMediaAndPlaceholderMismatch) {
  Json parts = Json::array();
  for (int i = 0; i < 9; ++i) parts.push_back(ImagePart(DataUri("image/png", "images/tiny_5x7.png")));
  Expect400(ChatBody({{{"role", "user"}, {"content", parts}}}, 1).dump(), "messages[0].content[8]", "at most 8",
            "too_many_images");
  Expect400(ChatBody({TextMessage("look at <|image_1|> please")}, 1).dump(), "messages");
}

TEST(ServerErrors, HttpLevelStatuses) {
  auto& s = Shared();
  auto nf = Get(s.port, "/v1/embeddings");
  EXPECT_EQ(nf.status, 404);
  EXPECT_EQ(nf.json()["error"]["type"], "not_found_error");
  auto get_chat = Get(s.port, "/v1/chat/completions");
  EXPECT_EQ(get_chat.status, 405);
  EXPECT_EQ(get_chat.header("Allow"), "POST");
  EXPECT_EQ(get_chat.json()["error"]["code"], "method_not_allowed");
  auto post_models = Post(s.port, "/v1/models", "{}");
  EXPECT_EQ(post_models.status, 405);
  // 5 MiB body against this server's 4 MiB limit.
  auto big = Post(s.port, "/v1/chat/completions", std::string(5 << 20, ' '));
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(big.json()["error"]["code"], "request_too_large");
  // A body that stops before its Content-Length: the connection times out or closes, never a crash.
  const int fd = RawConnect(s.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"mess");
  ASSERT_GE(fd, 0);
  shutdown(fd, SHUT_WR);
  RawReadUntil(fd, "\r\n\r\n");
  close(fd);
  EXPECT_EQ(Get(s.port, "/health").status, 200);
}

TEST(ServerErrors, ApiKeyIsRequiredExceptForHealth) {
  server::ServerOptions so;
  so.api_keys = {"sekrit"};
  auto s = StartTestServer(so);
  const std::string body = ChatBody({TextMessage("x")}, 1).dump();
  auto none = Post(s.port, "/v1/chat/completions", body);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.json()["error"]["type"], "authentication_error");
  EXPECT_EQ(none.header("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(Post(s.port, "/v1/chat/completions", body, {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(Post(s.port, "/v1/chat/completions", body, {{"Authorization", "sekrit"}}).status, 401);
  EXPECT_EQ(Get(s.port, "/v1/models").status, 401);
  EXPECT_EQ(Get(s.port, "/metrics").status, 401);
  EXPECT_EQ(Get(s.port, "/health").status, 200);
  EXPECT_EQ(Post(s.port, "/v1/chat/completions", body, {{"Authorization", "Bearer sekrit"}}).status, 200);
}

TEST(ServerErrors, OverloadIsAnswered429WithRetryAfter) {
  EngineOptions eo;
  eo.max_running = 1;
  eo.max_queue = 1;
  eo.after_step = [] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); };  // no answer ends before all four arrive
  auto s = StartTestServer({}, eo);
  std::vector<HttpResult> results(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { results[i] = Post(s.port, "/v1/chat/completions", LongBody(60, false).dump()); });
  for (auto& t : threads) t.join();
  int ok = 0, busy = 0;
  for (const auto& r : results) {
    if (r.status == 200) ++ok;
    if (r.status == 429) {
      ++busy;
      EXPECT_FALSE(r.header("Retry-After").empty());
      EXPECT_EQ(r.json()["error"]["type"], "rate_limit_error");
    }
  }
  EXPECT_EQ(ok + busy, 4);
  EXPECT_GE(busy, 1);
  EXPECT_GE(ok, 1);
  EXPECT_GE(MetricValue(Get(s.port, "/metrics").body, "phi4mm_requests_rejected_total{reason=\"queue_full\"}"), busy);
}

TEST(ServerErrors, DisconnectCancelsWhileStreaming) {
  auto s = StartTestServer();
  const int fd = RawConnect(s.port, RawPost("/v1/chat/completions", LongBody(400, true).dump()));
  ASSERT_GE(fd, 0);
  // The role chunk and two content chunks.
  std::string got;
  size_t chunks = 0;
  for (int reads = 0; chunks < 3 && reads < 100; ++reads) {
    const std::string more = RawReadUntil(fd, "\n\n");
    if (more.empty()) break;
    got += more;
    chunks = 0;
    for (size_t at = got.find("data: "); at != std::string::npos; at = got.find("data: ", at + 1)) ++chunks;
  }
  close(fd);
  EXPECT_TRUE(WaitEngineIdle(s.port, 3.0));
  const std::string m = Get(s.port, "/metrics").body;
  EXPECT_EQ(MetricValue(m, "phi4mm_cancelled_total{reason=\"disconnect\"}"), 1);
  EXPECT_LT(MetricValue(m, "phi4mm_generation_tokens_total"), 300);
}

TEST(ServerErrors, DisconnectCancelsAQueuedAndANonStreamingRequest) {
  EngineOptions eo;
  eo.max_running = 1;
  // 10 ms a step keeps the first request in its slot for seconds: on the fixture it would
  // otherwise finish its 400 tokens in well under a second, and the queued one would start
  // running before its client leaves.
  eo.after_step = [] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); };
  auto s = StartTestServer({}, eo);
  // The first request occupies the only running slot...
  // (The role chunk can come before the engine admits the request, so wait for it to run: until
  // then the waiting request the gauge counts may be this one.)
  const int busy = RawConnect(s.port, RawPost("/v1/chat/completions", LongBody(400, true).dump()));
  RawReadUntil(busy, "data: ");
  for (int i = 0; i < 100 && MetricValue(Get(s.port, "/metrics").body, "phi4mm_requests_running") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // ...so the second one waits in the queue when its client leaves.
  const int queued = RawConnect(s.port, RawPost("/v1/chat/completions", LongBody(400, false).dump()));
  for (int i = 0; i < 100 && MetricValue(Get(s.port, "/metrics").body, "phi4mm_requests_waiting") < 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    const std::string m = Get(s.port, "/metrics").body;
    EXPECT_EQ(MetricValue(m, "phi4mm_requests_running"), 1);
    EXPECT_EQ(MetricValue(m, "phi4mm_requests_waiting"), 1);
  }
  close(queued);
  for (int i = 0; i < 100 && MetricValue(Get(s.port, "/metrics").body, "phi4mm_requests_waiting") > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(MetricValue(Get(s.port, "/metrics").body, "phi4mm_requests_waiting"), 0);
  close(busy);
  EXPECT_TRUE(WaitEngineIdle(s.port, 3.0));
  EXPECT_EQ(MetricValue(Get(s.port, "/metrics").body, "phi4mm_cancelled_total{reason=\"disconnect\"}"), 2);
}

TEST(ServerErrors, RequestTimeoutEndsTheStreamWithAnErrorEvent) {
  server::ServerOptions so;
  so.request_timeout_seconds = 0.3;
  auto s = StartTestServer(so);
  auto r = Post(s.port, "/v1/chat/completions", LongBody(490, true).dump());
  ASSERT_EQ(r.status, 200);
  const auto events = SseEvents(r.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  const Json err = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(err["error"]["code"], "request_timeout") << r.body.substr(r.body.size() > 400 ? r.body.size() - 400 : 0);
  EXPECT_EQ(MetricValue(Get(s.port, "/metrics").body, "phi4mm_cancelled_total{reason=\"timeout\"}"), 1);
}

}  // namespace
}  // namespace phi4mm::test
