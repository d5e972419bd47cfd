// Perplexity and KL divergence over windows of a token stream (perplexity.h), mirroring
// llama.cpp's tools/perplexity/perplexity.cpp (perplexity() and kl_divergence(): the window cut,
// the scored second half, the 16-bit log-probability code, the -16 cut-off of the KL sum, the
// argmax comparison and the statistics it prints).
#include "phi4mm/runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "phi4mm/runtime/model.h"

namespace phi4mm {

namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr float kLogProbRange = 16.0f;

// Rounds to the nearest integer with the float trick llama.cpp uses (exact for |v| < 2^22).
int NearestInt(float v) {
  float f = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &f, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

Status WriteAll(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes && std::fwrite(data, 1, bytes, f) != bytes)
    return Internal("cannot write '" + path + "' (disk full?)");
  return Status::Ok();
}

Status ReadAll(std::FILE* f, void* data, size_t bytes, const std::string& path, const std::string& what) {
  if (bytes && std::fread(data, 1, bytes, f) != bytes)
    return DataLoss("'" + path + "' ends before its " + what + " (truncated reference file?)");
  return Status::Ok();
}

}  // namespace

double EncodeLogProbs(const float* logits, int64_t n_vocab, int32_t target, uint16_t* row) {
  float max_logit = logits[0], min_logit = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  min_logit = std::max(min_logit, max_logit - kLogProbRange);
  double sum_exp = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(row, &scale, sizeof(float));
  std::memcpy(row + 2, &min_log_prob, sizeof(float));
  uint16_t* codes = row + 4;
  if (scale != 0) {
    const float inv_scale = 1 / scale;
    for (int64_t i = 0; i < n_vocab; ++i)
      codes[i] = logits[i] > min_logit ? static_cast<uint16_t>(NearestInt(inv_scale * (logits[i] - min_logit))) : 0;
  } else {
    std::memset(codes, 0, sizeof(uint16_t) * n_vocab);
  }
  if (n_vocab % 2) codes[n_vocab] = 0;
  return static_cast<double>(max_logit) + log_sum_exp - logits[target];
}

void ScoreSums::AddNll(double nll) {
  sum_nll += nll;
  sum_nll2 += nll * nll;
  ++count;
}

double ScoreSums::AddWithReference(const float* logits, int64_t n_vocab, int32_t target, const uint16_t* ref_row) {
  float max_logit = logits[0];
  int64_t imax = 0;
  for (int64_t i = 1; i < n_vocab; ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      imax = i;
    }
  }
  double sum_exp = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale, min_log_prob;
  std::memcpy(&scale, ref_row, sizeof(float));
  std::memcpy(&min_log_prob, ref_row + 2, sizeof(float));
  const uint16_t* codes = ref_row + 4;
  const float nll = max_logit + log_sum_exp - logits[target];
  const float nll_base = -(scale * codes[target] + min_log_prob);
  AddNll(nll);
  sum_nll_base += nll_base;
  sum_nll_base2 += static_cast<double>(nll_base) * nll_base;
  sum_nll_nll_base += static_cast<double>(nll) * nll_base;
  const float log_norm = max_logit + log_sum_exp;
  double kl = 0;
  int64_t imax_base = 0;
  float best = 0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const float lp_base = scale * codes[i] + min_log_prob;
    if (i == 0 || lp_base > best) {
      best = lp_base;
      imax_base = i;
    }
    if (lp_base > -kLogProbRange) kl += std::exp(lp_base) * (lp_base - logits[i] + log_norm);
  }
  sum_kld += kl;
  sum_kld2 += kl * kl;
  same_top += imax == imax_base;
  kld.push_back(static_cast<float>(kl));
  return kl;
}

MeanError MeanAndError(double sum, double sum2, int64_t count) {
  if (count < 1) return {};
  const double f = sum / count;
  const double df = sum2 / count - f * f;
  return {f, df > 0 && count > 10 ? std::sqrt(df / (count - 1)) : 0.0};
}

double Percentile(std::vector<float> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  if (fraction <= 0) return values.front();
  if (fraction >= 1) return values.back();
  double p = fraction * (values.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= ip;
  return (1 - p) * values[ip] + p * values[std::min(ip + 1, values.size() - 1)];
}

Result<LogProbFileHeader> ReadLogProbHeader(std::FILE* f, const std::string& path) {
  char magic[8];
  PHI4MM_RETURN_IF_ERROR(ReadAll(f, magic, 8, path, "header"));
  if (std::memcmp(magic, kMagic, 8) != 0)
    return InvalidArgument("'" + path + "' is not a log-probability file (written by `phi4mm perplexity "
                           "--save-logits` or `llama-perplexity --kl-divergence-base`)");
  uint32_t n_ctx = 0;
  int32_t n_vocab = 0, n_chunk = 0;
  PHI4MM_RETURN_IF_ERROR(ReadAll(f, &n_ctx, 4, path, "header"));
  PHI4MM_RETURN_IF_ERROR(ReadAll(f, &n_vocab, 4, path, "header"));
  PHI4MM_RETURN_IF_ERROR(ReadAll(f, &n_chunk, 4, path, "header"));
  if (n_ctx < 4 || n_ctx > (1u << 24) || n_vocab <= 0 || n_chunk <= 0 || n_chunk > (1 << 24))
    return DataLoss("'" + path + "' has an implausible header (context " + std::to_string(n_ctx) + ", vocabulary " +
                    std::to_string(n_vocab) + ", " + std::to_string(n_chunk) + " windows)");
  LogProbFileHeader h;
  h.context = n_ctx;
  h.n_vocab = n_vocab;
  h.chunks = n_chunk;
  h.tokens.resize(static_cast<size_t>(n_ctx) * n_chunk);
  PHI4MM_RETURN_IF_ERROR(ReadAll(f, h.tokens.data(), h.tokens.size() * sizeof(int32_t), path, "tokens"));
  return h;
}

Result<PerplexityResult> EvaluatePerplexity(const Model& model, std::span<const int32_t> tokens,
                                            const PerplexityOptions& opts) {
  const Decoder& dec = model.decoder();
  const int64_t V = dec.config().vocab_size, H = dec.config().hidden_size;
  if (!opts.save_path.empty() && !opts.reference_path.empty())
    return InvalidArgument("write a reference (--save-logits) or score against one (--kl-reference), not both");

  File ref;
  LogProbFileHeader header;
  int64_t ctx = opts.context;
  std::vector<int32_t> ids(tokens.begin(), tokens.end());
  if (!opts.reference_path.empty()) {
    ref.reset(std::fopen(opts.reference_path.c_str(), "rb"));
    if (!ref) return NotFound("cannot open the reference file '" + opts.reference_path + "'");
    PHI4MM_ASSIGN_OR_RETURN(header, ReadLogProbHeader(ref.get(), opts.reference_path));
    if (header.n_vocab != V)
      return InvalidArgument("the reference '" + opts.reference_path + "' has a vocabulary of " +
                             std::to_string(header.n_vocab) + " ids, this model " + std::to_string(V));
    if (opts.context > 0 && opts.context != header.context)
      return InvalidArgument("the reference was written with --ctx " + std::to_string(header.context) + ", not " +
                             std::to_string(opts.context));
    ctx = header.context;
    if (!ids.empty()) {
      const size_t n = std::min(ids.size(), header.tokens.size());
      for (size_t i = 0; i < n; ++i)
        if (ids[i] != header.tokens[i])
          return InvalidArgument("the text does not tokenize to the reference's tokens: position " +
                                 std::to_string(i) + " is id " + std::to_string(ids[i]) + " here and " +
                                 std::to_string(header.tokens[i]) + " in '" + opts.reference_path + "'");
      if (ids.size() < header.tokens.size())
        return InvalidArgument("the text has " + std::to_string(ids.size()) + " tokens, the reference " +
                               std::to_string(header.tokens.size()));
    }
    ids = header.tokens;
  }
  if (ctx < 4 || ctx % 2)
    return InvalidArgument("the context must be an even number of at least 4 positions, got " + std::to_string(ctx));
  if (ctx > model.context_length())
    return InvalidArgument("--ctx " + std::to_string(ctx) + " is beyond the model's context of " +
                           std::to_string(model.context_length()));
  int64_t chunks = static_cast<int64_t>(ids.size()) / ctx;
  if (opts.max_chunks > 0) chunks = std::min(chunks, opts.max_chunks);
  if (chunks < 1)
    return InvalidArgument("the text has " + std::to_string(ids.size()) + " tokens, fewer than one window of " +
                           std::to_string(ctx));
  for (int64_t i = 0; i < chunks * ctx; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      return InvalidArgument("token " + std::to_string(i) + " (id " + std::to_string(ids[i]) +
                             ") is outside the vocabulary");

  const int64_t first = ctx / 2, scored = ctx - 1 - first, width = LogProbRowWidth(V);
  File out;
  if (!opts.save_path.empty()) {
    out.reset(std::fopen(opts.save_path.c_str(), "wb"));
    if (!out) return InvalidArgument("cannot create '" + opts.save_path + "'");
    const uint32_t n_ctx = static_cast<uint32_t>(ctx);
    const int32_t n_vocab = static_cast<int32_t>(V), n_chunk = static_cast<int32_t>(chunks);
    PHI4MM_RETURN_IF_ERROR(WriteAll(out.get(), kMagic, 8, opts.save_path));
    PHI4MM_RETURN_IF_ERROR(WriteAll(out.get(), &n_ctx, 4, opts.save_path));
    PHI4MM_RETURN_IF_ERROR(WriteAll(out.get(), &n_vocab, 4, opts.save_path));
    PHI4MM_RETURN_IF_ERROR(WriteAll(out.get(), &n_chunk, 4, opts.save_path));
    PHI4MM_RETURN_IF_ERROR(WriteAll(out.get(), ids.data(), sizeof(int32_t) * chunks * ctx, opts.save_path));
  }

  const bool long_rope = dec.rotary().UseLong(ctx);
  constexpr int64_t kBlock = 16;  // lm_head rows per pass: bounds the logits buffer to 16 x vocab floats
  std::vector<float> embeds(ctx * H), hidden(ctx * H), logits(kBlock * V);
  DecoderScratch scratch;
  std::vector<uint16_t> rows(scored * width);
  std::vector<ScoreSums> part(kBlock);
  ScoreSums sums;
  ThreadPool* pool = model.pool();
  for (int64_t c = 0; c < chunks; ++c) {
    const std::span<const int32_t> win(ids.data() + c * ctx, ctx);
    if (ref) PHI4MM_RETURN_IF_ERROR(ReadAll(ref.get(), rows.data(), rows.size() * 2, opts.reference_path,
                                            "log-probabilities of window " + std::to_string(c)));
    PHI4MM_RETURN_IF_ERROR(model.embedding().Embed(win, embeds.data()));
    KvCache cache = dec.NewCache();
    // One pass over the window with the final-norm hidden state of every row as its output.
    const SeqChunk window{embeds.data(), ctx, &cache, opts.mode, long_rope, nullptr, hidden.data()};
    PHI4MM_RETURN_IF_ERROR(dec.Step(std::span(&window, 1), pool, &scratch));
    for (int64_t r0 = 0; r0 < scored; r0 += kBlock) {
      const int64_t n = std::min(kBlock, scored - r0);
      dec.LogitsRows(hidden.data() + (first + r0) * H, n, logits.data(), pool);
      for (auto& p : part) p = ScoreSums{};
      pool->ParallelFor(n, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          const float* lg = logits.data() + j * V;
          const int32_t target = win[first + r0 + j + 1];
          uint16_t* row = rows.data() + (r0 + j) * width;
          if (ref) part[j].AddWithReference(lg, V, target, row);
          else part[j].AddNll(EncodeLogProbs(lg, V, target, row));
        }
      });
      for (int64_t j = 0; j < n; ++j) {  // in position order: the sums do not depend on the thread count
        const ScoreSums& p = part[j];
        sums.count += p.count;
        sums.sum_nll += p.sum_nll;
        sums.sum_nll2 += p.sum_nll2;
        sums.sum_nll_base += p.sum_nll_base;
        sums.sum_nll_base2 += p.sum_nll_base2;
        sums.sum_nll_nll_base += p.sum_nll_nll_base;
        sums.sum_kld += p.sum_kld;
        sums.sum_kld2 += p.sum_kld2;
        sums.same_top += p.same_top;
        sums.kld.insert(sums.kld.end(), p.kld.begin(), p.kld.end());
      }
    }
    if (out) PHI4MM_RETURN_IF_ERROR(WriteAll(out.get(), rows.data(), rows.size() * 2, opts.save_path));
    if (opts.progress) opts.progress(c + 1, chunks);
  }
  if (out && std::fclose(out.release()) != 0) return Internal("cannot finish writing '" + opts.save_path + "'");

  PerplexityResult res;
  res.context = ctx;
  res.chunks = chunks;
  res.scored = sums.count;
  res.nll = MeanAndError(sums.sum_nll, sums.sum_nll2, sums.count);
  res.ppl = std::exp(res.nll.mean);
  res.ppl_error = res.ppl * res.nll.stderr_;
  if (ref) {
    KlSummary k;
    const MeanError base = MeanAndError(sums.sum_nll_base, sums.sum_nll_base2, sums.count);
    k.ppl_base = std::exp(base.mean);
    // Var(nll - nll_base) = Var(nll) + Var(nll_base) - 2 Cov, per position, as a standard error of the mean.
    const double n = static_cast<double>(sums.count);
    const double cov = sums.count >= 10 ? (sums.sum_nll_nll_base / n - (sums.sum_nll / n) * (sums.sum_nll_base / n)) / (n - 1) : 0;
    const double var = res.nll.stderr_ * res.nll.stderr_ + base.stderr_ * base.stderr_ - 2 * cov;
    k.ln_ppl_ratio = {res.nll.mean - base.mean, var > 0 ? std::sqrt(var) : 0};
    k.kld = MeanAndError(sums.sum_kld, sums.sum_kld2, sums.count);
    const std::vector<float>& v = sums.kld;
    k.kld_median = Percentile(v, 0.5);  // the mean of the middle two for an even count
    k.kld_p90 = Percentile(v, 0.90);
    k.kld_p99 = Percentile(v, 0.99);
    k.kld_p999 = Percentile(v, 0.999);
    k.kld_max = Percentile(v, 1.0);
    const double top = static_cast<double>(sums.same_top) / n;
    k.same_top = {top, sums.count > 1 ? std::sqrt(top * (1 - top) / (n - 1)) : 0};
    res.kl = k;
  }
  return res;
}

}  // namespace phi4mm
