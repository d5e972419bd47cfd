// POST /v1/chat/completions/render and /v1/completions/render: vLLM's render endpoints
// (vllm/entrypoints/serve/render; answer: GenerateRequest, for completions a list of one), which
// vllm-router's cache_aware policy calls on its workers to route by the prompt's token ids. The
// ids are the prompt as this server would run it, with one change: every image and audio position
// carries an id derived from the media's bytes and its row (MediaRowId) instead of the placeholder
// id, so a router matching id prefixes sees a resent image as the same and two images as
// different. `features` stays null (the router declines rendered multimodal features). Nothing is
// decoded but audio headers and clips (the count route's admission); no encoder runs.
#include "json_fields.h"
#include "phi4mm/base/sha256.h"
#include "phi4mm/runtime/media.h"
#include "phi4mm/tokenizer/chat_format.h"
#include "response.h"
#include "server_internal.h"
#include "tool_calls.h"

namespace phi4mm::server {

namespace {

// An id at or above the vocabulary (never a real token) for row `row` of the media item whose
// encoded bytes have digest `d`; below 2^31 so every JSON reader takes it as an int32.
int32_t MediaRowId(const Digest& d, int64_t row, int64_t vocab) {
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x = (x << 8) | d[static_cast<size_t>(i)];
  x ^= static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ull;  // splitmix64 finaliser
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  const uint64_t span = (uint64_t{1} << 31) - 1 - static_cast<uint64_t>(vocab);
  return static_cast<int32_t>(static_cast<uint64_t>(vocab) + x % span);
}

// Replaces the placeholder rows of `ids` by MediaRowId: the k-th run of image rows (counts[k] of
// them, in order) with the k-th image's digest, the same for audio.
void MarkMediaRows(std::vector<int32_t>* ids, int32_t placeholder, const std::vector<int64_t>& counts,
                   const std::vector<Digest>& digests, int64_t vocab) {
  size_t item = 0;
  int64_t row = 0;
  for (int32_t& id : *ids) {
    if (id != placeholder || item >= digests.size() || item >= counts.size()) continue;
    id = MediaRowId(digests[item], row, vocab);
    if (++row == counts[item]) {
      ++item;
      row = 0;
    }
  }
}

Json SamplingParams(const GenerateOptions& g) {
  const SamplingOptions& o = g.sampling;
  return {{"max_tokens", g.max_new_tokens}, {"temperature", o.temperature}, {"top_p", o.top_p},
          {"top_k", o.top_k},               {"min_p", o.min_p},             {"seed", o.seed}};
}

// The SHA-256 of each image's and clip's encoded bytes, in order; false (with the error sent) when
// a part's bytes cannot be had. Before admission, which consumes the parts.
struct MediaDigests {
  std::vector<Digest> images, audios;
};

bool DigestMedia(Server::Impl& s, const ParsedRequest& p, const http::Exchange& ex, MediaDigests* out) {
  for (const MediaSource& src : p.media_sources) {
    std::string bytes;
    if (ApiError e = MediaBytes(src, s.opts.limits.media, &bytes); !e.ok()) {
      s.SendError(ex, e);
      return false;
    }
    Sha256 h;
    h.Update(bytes.data(), bytes.size());
    (src.kind == MediaSource::kImage ? out->images : out->audios).push_back(h.Finish());
  }
  return true;
}

void Render(Server::Impl& s, const ParsedRequest& p, const MediaDigests& digests, bool chat, const http::Exchange& ex) {
  std::shared_ptr<const Model> model;
  {
    std::shared_lock<std::shared_mutex> l(s.model_mu);
    model = s.model;
  }
  if (!model) return s.SendError(ex, Unavailable("the server is shutting down", 5));
  const EngineRequest& er = p.engine;
  std::vector<int32_t> ids = er.prompt_ids;
  PromptCount count;
  if (!er.prompt.empty() || !er.media.empty()) {
    ids.clear();
    auto c = CountPrompt(model->config(), model->tokenizer(), er.prompt, er.media, er.prompt_options, &ids);
    if (!c.ok()) return s.SendError(ex, FromStatus(c.status(), chat ? "messages" : "prompt"));
    count = *c;
  }
  const int64_t vocab = model->embedding().vocab_size();
  MarkMediaRows(&ids, kImageTokenId, count.image_tokens, digests.images, vocab);
  MarkMediaRows(&ids, kAudioTokenId, count.audio_tokens, digests.audios, vocab);
  Json one = {{"request_id", RandomId(chat ? "chatcmpl-" : "cmpl-", 24)},
              {"token_ids", ids},
              {"features", nullptr},
              {"sampling_params", SamplingParams(er.generate)},
              {"model", p.model.empty() ? s.opts.served_name : p.model},
              {"stream", p.stream},
              {"cache_salt", nullptr},
              {"priority", 0},
              {"kv_transfer_params", nullptr}};
  http::Response r;
  r.body = chat ? one.dump() : Json::array({one}).dump();
  ex.Send(std::move(r));
}

}  // namespace

void InstallRenderRoutes(Server::Impl& s) {
  using Run = http::Server::Run;
  s.http.Route("POST", "/v1/chat/completions/render", Run::kWorker, [&s](http::Request& req, http::Exchange ex) {
    ParsedRequest p;
    ModelFacts facts;
    if (!ParseApiRequest(s, req, ex, true, &p, &facts, /*answer_streams=*/false)) return;
    MediaDigests digests;
    if (!DigestMedia(s, p, ex, &digests)) return;
    s.AdmitMedia(std::move(p), facts, ex, /*counting=*/true,
                 [&s, ex, digests](ParsedRequest admitted, std::shared_ptr<http::BudgetHold>, int64_t) {
                   Render(s, admitted, digests, true, ex);
                 });
  });
  s.http.Route("POST", "/v1/completions/render", Run::kWorker, [&s](http::Request& req, http::Exchange ex) {
    ParsedRequest p;
    if (!ParseApiRequest(s, req, ex, false, &p, nullptr, /*answer_streams=*/false)) return;
    Render(s, p, MediaDigests{}, false, ex);
  });
}

}  // namespace phi4mm::server
