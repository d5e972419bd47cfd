// `phi4mm bench --speculative ngram`: one answer's decode speed with speculative decoding against
// the same answer without, in the same run. A copying prompt (a random passage twice, then its
// start again) is answered greedily: plain; with prompt-lookup drafts; and with the plain answer as
// its prediction (OpenAI's Predicted Outputs), as it is (the verify step's best case, independent of
// what the model writes) and with 50 %, 90 % and 100 % of its tokens replaced by random ids (the
// acceptance falls), and with a random id after each of its ids (every draft is offered and its
// first id is wrong: 0 % acceptance, where speculation must turn itself off); and plain again, the
// run's own noise between two runs of the same work. For each: decode tokens per second
// and its ratio to plain, drafted and accepted tokens, and tokens committed per decoder step; every
// answer must equal the plain one (exit 1 otherwise). Best of --rounds, interleaved.
#include <algorithm>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "cli_common.h"

namespace phi4mm::cli {

namespace {

// --prompts FILE: each line a user turn, answered greedily plain and with prompt-lookup drafts
// (a rewrite or extraction set on a model that copies); per prompt and in total, decode tok/s of
// both, their ratio, and the acceptance. The answers must be equal.
int PromptSetBench(const BenchFlags& f, const std::shared_ptr<const Model>& model) {
  auto text = ReadFileToString(f.speculative_prompts);
  if (!text.ok()) return ReportError(text.status().WithContext("--prompts"));
  std::vector<std::string> prompts;
  for (size_t at = 0; at < text->size();) {
    const size_t end = std::min(text->find('\n', at), text->size());
    if (end > at) prompts.push_back(text->substr(at, end - at));
    at = end + 1;
  }
  if (prompts.empty()) return ReportError(InvalidArgument("--prompts " + f.speculative_prompts + " holds no prompt"));
  std::printf("speculative decoding on %zu prompts of %s: %s, %lld new tokens, draft <= %d, best of %d\n",
              prompts.size(), f.speculative_prompts.c_str(), f.model.dir.c_str(),
              static_cast<long long>(f.decode_tokens), f.draft_max, f.rounds);
  std::printf("%-6s %12s %12s %8s %10s %10s\n", "prompt", "plain tok/s", "ngram tok/s", "ratio", "drafted", "accepted");
  double plain_s = 0, spec_s = 0;
  int64_t tokens = 0, drafted = 0, accepted = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto rendered = RenderUserPrompt(prompts[i], "", false, 0, 0);
    if (!rendered.ok()) return ReportError(rendered.status());
    auto ids = model->tokenizer().Encode(*rendered);
    if (!ids.ok()) return ReportError(ids.status());
    GenerateResult best[2];
    for (int round = 0; round < f.rounds; ++round)
      for (int w = 0; w < 2; ++w) {
        GenerateOptions go;
        go.max_new_tokens = f.decode_tokens;
        go.speculative.max_draft = f.draft_max;
        if (w == 1) go.speculative.mode = SpeculativeMode::kNgram;
        Session s(model);
        auto r = s.Generate(*ids, LoraMode::kNone, go);
        if (!r.ok()) return ReportError(r.status());
        if (round == 0 || r->decode_seconds < best[w].decode_seconds) best[w] = *r;
      }
    if (best[1].tokens != best[0].tokens) {
      std::fprintf(stderr, "phi4mm: error: prompt %zu: the speculative answer differs from the plain one\n", i + 1);
      return 1;
    }
    const double n = static_cast<double>(best[0].tokens.size()) - 1;
    const double a = best[0].decode_seconds > 0 ? n / best[0].decode_seconds : 0;
    const double b = best[1].decode_seconds > 0 ? n / best[1].decode_seconds : 0;
    std::printf("%-6zu %12.2f %12.2f %7.2fx %10lld %10lld\n", i + 1, a, b, a > 0 ? b / a : 0,
                static_cast<long long>(best[1].draft_tokens), static_cast<long long>(best[1].accepted_draft_tokens));
    plain_s += best[0].decode_seconds;
    spec_s += best[1].decode_seconds;
    tokens += static_cast<int64_t>(n);
    drafted += best[1].draft_tokens;
    accepted += best[1].accepted_draft_tokens;
  }
  std::printf("%-6s %12.2f %12.2f %7.2fx %10lld %10lld  (acceptance %.0f%%)\n", "all", tokens / plain_s,
              tokens / spec_s, plain_s / spec_s, static_cast<long long>(drafted), static_cast<long long>(accepted),
              drafted > 0 ? 100.0 * accepted / drafted : 0.0);
  return 0;
}

}  // namespace

int SpeculativeBenchCommand(const BenchFlags& f) {
  auto model = LoadModel(f.model);
  if (!model.ok()) return ReportError(model.status());
  if (!f.speculative_prompts.empty()) return PromptSetBench(f, *model);
  const Model& m = **model;
  if (f.prompt_tokens < 2 || f.decode_tokens < 2 || f.rounds < 1)
    return ReportError(InvalidArgument("--prompt-tokens and --decode-tokens must be >= 2, --rounds >= 1"));
  std::mt19937 rng(42);
  const int64_t passage_len = std::max<int64_t>(1, f.prompt_tokens / 2);
  const std::vector<int32_t> passage = RandomIds(rng, passage_len, m.embedding().vocab_size());
  std::vector<int32_t> prompt = passage;
  prompt.insert(prompt.end(), passage.begin(), passage.end());
  prompt.insert(prompt.end(), passage.begin(), passage.begin() + std::min<int64_t>(8, passage_len));

  struct Way {
    const char* name;
    GenerateResult best;
    double best_tok_s = 0;
  };
  // A prediction of the plain answer with a share of its tokens replaced by random ids: 0 % (all
  // of it can be accepted), 50 %, 90 % and 100 % (nothing in it follows the answer's tail, so
  // nothing is drafted); then the answer with a random id after each id (every draft is wrong).
  const double kPerturbed[] = {0.0, 0.5, 0.9, 1.0};
  std::vector<Way> ways = {{"plain", {}, 0},           {"ngram", {}, 0},           {"prediction", {}, 0},
                           {"prediction 50%", {}, 0}, {"prediction 90%", {}, 0},  {"prediction 100%", {}, 0},
                           {"all drafts wrong", {}, 0}, {"plain again", {}, 0}};
  const size_t kPlainAgain = ways.size() - 1;
  std::vector<int32_t> answer;
  std::vector<std::vector<int32_t>> predictions;
  for (int round = 0; round < f.rounds + 1; ++round) {  // round 0 warms up and finds the answer
    for (size_t w = 0; w < ways.size(); ++w) {
      GenerateOptions go;
      go.max_new_tokens = f.decode_tokens;
      go.stop_ids = {-1};  // run the whole budget
      go.speculative.max_draft = f.draft_max;
      if (w == 1) go.speculative.mode = SpeculativeMode::kNgram;
      if (w >= 2 && w < kPlainAgain) go.speculative.prediction = predictions[w - 2];
      Session s(*model);
      auto r = s.Generate(prompt, LoraMode::kNone, go);
      if (!r.ok()) return ReportError(r.status());
      if (w == 0 && round == 0) {
        answer = r->tokens;
        std::mt19937 pick(7);
        for (double share : kPerturbed) {
          std::vector<int32_t> p = answer;
          std::uniform_real_distribution<double> u(0, 1);
          for (int32_t& id : p)
            if (u(pick) < share) id = RandomIds(pick, 1, m.embedding().vocab_size())[0];
          predictions.push_back(std::move(p));
        }
        std::vector<int32_t> wrong;
        for (int32_t id : answer) wrong.insert(wrong.end(), {id, RandomIds(pick, 1, m.embedding().vocab_size())[0]});
        predictions.push_back(std::move(wrong));
      }
      if (r->tokens != answer) {
        std::fprintf(stderr, "phi4mm: error: the %s answer differs from the plain one\n", ways[w].name);
        return 1;
      }
      const double tok_s = r->decode_seconds > 0 ? static_cast<double>(r->tokens.size() - 1) / r->decode_seconds : 0;
      if (round > 0 && tok_s > ways[w].best_tok_s) {
        ways[w].best_tok_s = tok_s;
        ways[w].best = *r;
      }
    }
  }
  nlohmann::json j = {{"model", f.model.dir},
                      {"prompt_tokens", prompt.size()},
                      {"decode_tokens", f.decode_tokens},
                      {"draft_max", f.draft_max},
                      {"rounds", f.rounds},
                      {"ways", nlohmann::json::array()}};
  for (const Way& w : ways) {
    const GenerateResult& g = w.best;
    j["ways"].push_back({{"way", w.name},
                         {"tok_per_s", w.best_tok_s},
                         {"ratio_to_plain", ways[0].best_tok_s > 0 ? w.best_tok_s / ways[0].best_tok_s : 0},
                         {"draft_tokens", g.draft_tokens},
                         {"accepted_draft_tokens", g.accepted_draft_tokens},
                         {"acceptance", g.draft_tokens > 0 ? static_cast<double>(g.accepted_draft_tokens) / g.draft_tokens : 0},
                         {"decode_steps", g.decode_steps},
                         {"tokens_per_step", g.decode_steps > 0 ? static_cast<double>(g.tokens.size() - 1) / g.decode_steps : 0}});
  }
  if (f.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("speculative decoding: %s, prompt %zu tokens (a passage twice, then its start), %lld new tokens, "
              "draft <= %d, best of %d; every answer equals the plain one\n",
              f.model.dir.c_str(), prompt.size(), static_cast<long long>(f.decode_tokens), f.draft_max, f.rounds);
  std::printf("%-16s %10s %8s %10s %10s %12s\n", "way", "tok/s", "ratio", "drafted", "accepted", "tok/step");
  for (const auto& w : j["ways"])
    std::printf("%-16s %10.2f %7.2fx %10lld %10lld %12.2f\n", w["way"].get<std::string>().c_str(),
                w["tok_per_s"].get<double>(), w["ratio_to_plain"].get<double>(), w["draft_tokens"].get<long long>(),
                w["accepted_draft_tokens"].get<long long>(), w["tokens_per_step"].get<double>());
  return 0;
}

}  // namespace phi4mm::cli
