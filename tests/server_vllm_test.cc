// What routers and inference gateways read from a worker, as vLLM answers it: the render endpoints
// (routes_render.cc: the prompt's token ids with each image/audio row an id derived from the
// media's bytes; for completions a list of one) and the vllm:* metrics (metrics_vllm.cc), checked
// against the phi4mm_* series and the engine's stats they come from, including the LoRA adapters
// of running and waiting requests while an engine with one running slot is busy.
#include <future>

#include "phi4mm/tokenizer/chat_format.h"
#include "server_test_util.h"

namespace phi4mm::test {
namespace {

TestServer& Shared() {
  static TestServer* s = new TestServer(StartTestServer());
  return *s;
}

// At detail low (one crop: 481 positions of the tiny model's 512).
Json ImageMessage(const std::string& image, const std::string& text) {
  return {{"role", "user"},
          {"content", Json::array({{{"type", "image_url"},
                                    {"image_url", {{"url", DataUri("image/png", image)}, {"detail", "low"}}}},
                                   {{"type", "text"}, {"text", text}}})}};
}

Json AudioMessage(const std::string& clip, const std::string& text) {
  return {{"role", "user"},
          {"content", Json::array({{{"type", "input_audio"},
                                    {"input_audio", {{"data", server::Base64Encode(ReadFile(FixturePath(clip)))},
                                                     {"format", "wav"}}}},
                                   {{"type", "text"}, {"text", text}}})}};
}

std::vector<int64_t> RenderIds(int port, const Json& body) {
  auto r = Post(port, "/v1/chat/completions/render", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_TRUE(j.contains("features") && j["features"].is_null()) << r.body;
  return j.value("token_ids", std::vector<int64_t>{});
}

int64_t InputTokens(int port, const Json& body) {
  auto r = Post(port, "/v1/chat/completions/input_tokens", body.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return r.json().value("input_tokens", int64_t{-1});
}

TEST(ServerRender, TextIdsAreThePromptTheEngineRuns) {
  const Json body = ChatBody({TextMessage("Hello there")}, 4);
  const std::vector<int64_t> ids = RenderIds(Shared().port, body);
  EXPECT_EQ(static_cast<int64_t>(ids.size()), InputTokens(Shared().port, body));
  auto model = TinyModel("orig");
  const std::string rendered = "<|user|>Hello there<|end|><|assistant|>";
  auto want = model->tokenizer().Encode(rendered);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(ids.size(), want->size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], (*want)[i]) << i;
  // "stream": true changes nothing here: the answer is JSON.
  Json streamed = body;
  streamed["stream"] = true;
  auto r = Post(Shared().port, "/v1/chat/completions/render", streamed.dump());
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["token_ids"].get<std::vector<int64_t>>(), ids);
}

TEST(ServerRender, MediaRowsCarryIdsOfTheirBytes) {
  const int port = Shared().port;
  const Json a = ChatBody({ImageMessage("images/photo_640x480.png", "What is it?")}, 4);
  const Json b = ChatBody({ImageMessage("images/gray_200x150.png", "What is it?")}, 4);
  const std::vector<int64_t> a1 = RenderIds(port, a), a2 = RenderIds(port, a), bi = RenderIds(port, b);
  EXPECT_EQ(a1, a2);  // the same image: the same ids
  EXPECT_EQ(static_cast<int64_t>(a1.size()), InputTokens(port, a));
  const int64_t vocab = 200064;
  ASSERT_EQ(a1.size(), bi.size());  // one crop each: the same positions
  int64_t media_rows = 0, same = 0;
  for (size_t i = 0; i < a1.size(); ++i) {
    EXPECT_NE(a1[i], kImageTokenId);
    if (a1[i] >= vocab) {
      ++media_rows;
      EXPECT_LT(a1[i], int64_t{1} << 31);
      EXPECT_GE(bi[i], vocab) << i;
      if (bi[i] == a1[i]) ++same;
    } else {
      EXPECT_EQ(bi[i], a1[i]) << i;  // the text around them is the same
    }
  }
  EXPECT_GT(media_rows, 400);
  EXPECT_EQ(same, 0);  // another image: other ids on every row
  std::set<int64_t> distinct(a1.begin(), a1.end());
  EXPECT_GT(static_cast<int64_t>(distinct.size()), media_rows / 2);  // rows differ within an image too

  const Json audio = ChatBody({AudioMessage("audio/speech_16k_pcm16.wav", "Transcribe.")}, 4);
  const std::vector<int64_t> au = RenderIds(port, audio);
  EXPECT_EQ(static_cast<int64_t>(au.size()), InputTokens(port, audio));
  EXPECT_EQ(std::count(au.begin(), au.end(), int64_t{kAudioTokenId}), 0);
  EXPECT_GT(std::count_if(au.begin(), au.end(), [&](int64_t id) { return id >= vocab; }), 10);

  // A bad image is the error the chat route gives.
  const Json bad = ChatBody({ImageMessage("images/bad_truncated.png", "?")}, 4);
  auto r = Post(port, "/v1/chat/completions/render", bad.dump());
  auto c = Post(port, "/v1/chat/completions", bad.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"], c.json()["error"]);
}

TEST(ServerRender, CompletionsAnswerAListOfOne) {
  auto r = Post(Shared().port, "/v1/completions/render", R"({"model":"tiny","prompt":"hello world"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  ASSERT_TRUE(j.is_array() && j.size() == 1u) << r.body;
  auto want = TinyModel("orig")->tokenizer().Encode("hello world");
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(j[0]["token_ids"].get<std::vector<int32_t>>(), *want);
  EXPECT_EQ(j[0]["request_id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(Post(Shared().port, "/v1/completions/render", R"({"model":"tiny"})").status, 400);
}

// The value of the vllm: sample `name` with the model_name/engine labels (and `more` after them).
double Vllm(const std::string& metrics, const std::string& name, const std::string& more = "") {
  return MetricValue(metrics, name + "{model_name=\"tiny\",engine=\"0\"" + more + "}");
}

TEST(ServerVllmMetrics, EverySeriesMatchesTheEngine) {
  const int port = Shared().port;
  ASSERT_EQ(Post(port, "/v1/chat/completions", ChatBody({TextMessage("Hello")}, 6).dump()).status, 200);
  ASSERT_EQ(Post(port, "/v1/chat/completions", ChatBody({TextMessage("Hello")}, 6).dump()).status, 200);
  ASSERT_EQ(Post(port, "/v1/chat/completions", ChatBody({ImageMessage("images/gray_200x150.png", "Hi")}, 3).dump()).status,
            200);
  Json spec = ChatBody({TextMessage("a b c a b c a b c")}, 24);
  spec["speculative"] = "ngram";
  ASSERT_EQ(Post(port, "/v1/chat/completions", spec.dump()).status, 200);
  std::string m;
  ASSERT_TRUE(WaitEngineIdle(port, 10, &m));
  EXPECT_EQ(Vllm(m, "vllm:num_requests_running"), MetricValue(m, "phi4mm_requests_running"));
  EXPECT_EQ(Vllm(m, "vllm:num_requests_waiting"), MetricValue(m, "phi4mm_requests_waiting"));
  EXPECT_EQ(Vllm(m, "vllm:kv_cache_usage_perc"), 0);
  EXPECT_EQ(Vllm(m, "vllm:gpu_cache_usage_perc"), 0);
  EXPECT_EQ(Vllm(m, "vllm:prefix_cache_hits_total"), MetricValue(m, "phi4mm_prefix_cache_hit_tokens_total"));
  EXPECT_GT(Vllm(m, "vllm:prefix_cache_hits_total"), 0);  // the second "Hello" reused the first's prompt
  EXPECT_LE(Vllm(m, "vllm:prefix_cache_hits_total"), Vllm(m, "vllm:prefix_cache_queries_total"));
  EXPECT_EQ(Vllm(m, "vllm:generation_tokens_total"), MetricValue(m, "phi4mm_generation_tokens_total"));
  double prompt = 0;
  for (const char* k : {"text", "image", "audio"})
    prompt += MetricValue(m, std::string("phi4mm_prompt_tokens_total{kind=\"") + k + "\"}");
  EXPECT_EQ(Vllm(m, "vllm:prompt_tokens_total"), prompt);
  // Each request looked its prompt up once, all of it but the last position (which must run).
  EXPECT_EQ(Vllm(m, "vllm:prefix_cache_queries_total"), prompt - 4);
  const double done = Vllm(m, "vllm:request_success_total", ",finished_reason=\"stop\"") +
                      Vllm(m, "vllm:request_success_total", ",finished_reason=\"length\"");
  EXPECT_EQ(done, MetricValue(m, "phi4mm_e2e_request_latency_seconds_count"));
  EXPECT_EQ(Vllm(m, "vllm:e2e_request_latency_seconds_count"), done);
  EXPECT_EQ(Vllm(m, "vllm:e2e_request_latency_seconds_bucket", ",le=\"+Inf\""), done);
  EXPECT_EQ(Vllm(m, "vllm:time_to_first_token_seconds_count"),
            MetricValue(m, "phi4mm_time_to_first_token_seconds_count"));
  EXPECT_EQ(Vllm(m, "vllm:inter_token_latency_seconds_count"),
            MetricValue(m, "phi4mm_inter_token_latency_seconds_count"));
  EXPECT_EQ(Vllm(m, "vllm:request_queue_time_seconds_count"), done);
  EXPECT_EQ(Vllm(m, "vllm:num_preemptions_total"), MetricValue(m, "phi4mm_kv_preemptions_total"));
  EXPECT_EQ(Vllm(m, "vllm:spec_decode_num_draft_tokens_total"), MetricValue(m, "phi4mm_draft_tokens_total"));
  EXPECT_EQ(Vllm(m, "vllm:spec_decode_num_accepted_tokens_total"), MetricValue(m, "phi4mm_accepted_draft_tokens_total"));
  EXPECT_GT(Vllm(m, "vllm:spec_decode_num_drafts_total"), 0);
  EXPECT_GT(Vllm(m, "vllm:spec_decode_num_accepted_tokens_total"), 0);
  EXPECT_LE(Vllm(m, "vllm:spec_decode_num_accepted_tokens_total"), Vllm(m, "vllm:spec_decode_num_draft_tokens_total"));
  EXPECT_NE(m.find("vllm:lora_requests_info{running_lora_adapters=\"\",max_lora=\"2\",waiting_lora_adapters=\"\"} "),
            std::string::npos);
  EXPECT_NE(m.find("# TYPE vllm:prefix_cache_hits_total counter"), std::string::npos);
  EXPECT_NE(m.find("# TYPE vllm:time_to_first_token_seconds histogram"), std::string::npos);
}

// One running slot, an engine slowed to 20 ms a step: an audio answer runs (speech adapter) while
// an image request waits (vision adapter); the gauges say so, and the KV in use is the budget's share.
TEST(ServerVllmMetrics, LoraAdaptersOfRunningAndWaitingRequests) {
  EngineOptions eo;
  eo.max_running = 1;
  eo.after_step = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  TestServer s = StartTestServer({}, eo);
  auto running = std::async(std::launch::async, [&] {
    return Post(s.port, "/v1/chat/completions",
                ChatBody({AudioMessage("audio/speech_16k_pcm16.wav", "Transcribe.")}, 40).dump());
  });
  std::string m;
  auto until = [&](const std::function<bool()>& f) {
    for (int i = 0; i < 400 && !f(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      m = Get(s.port, "/metrics").body;
    }
    return f();
  };
  ASSERT_TRUE(until([&] { return MetricValue(m, "phi4mm_requests_running") == 1; }));
  auto waiting = std::async(std::launch::async, [&] {
    return Post(s.port, "/v1/chat/completions", ChatBody({ImageMessage("images/gray_200x150.png", "Hi")}, 2).dump());
  });
  ASSERT_TRUE(until([&] { return MetricValue(m, "phi4mm_requests_waiting") == 1; }));
  EXPECT_NE(m.find("vllm:lora_requests_info{running_lora_adapters=\"speech\",max_lora=\"2\","
                   "waiting_lora_adapters=\"vision\"} "),
            std::string::npos)
      << m.substr(m.find("vllm:lora"), 200);
  EXPECT_EQ(Vllm(m, "vllm:num_requests_running"), 1);
  EXPECT_EQ(Vllm(m, "vllm:num_requests_waiting"), 1);
  EXPECT_EQ(Vllm(m, "vllm:kv_cache_usage_perc"),
            MetricValue(m, "phi4mm_kv_cache_bytes") / MetricValue(m, "phi4mm_kv_budget_bytes"));
  EXPECT_GT(Vllm(m, "vllm:kv_cache_usage_perc"), 0);
  EXPECT_EQ(running.get().status, 200);
  EXPECT_EQ(waiting.get().status, 200);
}

}  // namespace
}  // namespace phi4mm::test
