// Admission before work (server_internal.h, Server::Impl::AdmitMedia): a request's media are
// planned from their headers, the prompt's size is checked against the context as far as it is
// known without tokenizing, and the memory that decoding and preprocessing will hold is taken
// from the media budget before any pixel or sample is decoded. A request whose media do not fit
// now waits holding only its encoded bytes; its client leaving withdraws it.
#include "server_internal.h"

namespace phi4mm::server {

namespace {

std::string MiB(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

// The fewest tokens the prompt can need: its image tokens, and its text at the longest token per
// byte (each image placeholder in the text is replaced by the image's tokens).
int64_t FewestTokens(const ParsedRequest& p, const PlannedMedia& planned, const ModelFacts& facts) {
  const int64_t text_bytes = static_cast<int64_t>(p.engine.prompt.size());
  const int64_t text = text_bytes / std::max<int64_t>(1, facts.max_token_bytes);
  int64_t images = 0;
  for (const auto& item : planned.items) images += item.kind == MediaSource::kImage;
  return planned.image_tokens + std::max<int64_t>(0, text - images);
}

}  // namespace

void Server::Impl::AdmitMedia(ParsedRequest p, const ModelFacts& facts, const http::Exchange& ex, bool counting,
                              AdmittedNext next) {
  const bool image_pixels = !counting;
  auto planned = std::make_shared<PlannedMedia>();
  ImageProcessorOptions io;
  io.dynamic_hd = p.dynamic_hd > 0 ? p.dynamic_hd : facts.checkpoint_dynamic_hd;
  io.crop_size = facts.crop_size;
  io.patch_size = facts.patch_size;
  if (ApiError e = PlanMedia(p.media_sources, opts.limits.media, io, planned.get()); !e.ok()) return SendError(ex, e);
  p.media_sources.clear();
  if (const int64_t fewest = FewestTokens(p, *planned, facts); !counting && fewest > facts.context_length) {
    return SendError(ex, InvalidRequest("messages",
                                        "the prompt needs at least " + std::to_string(fewest) + " tokens (" +
                                            std::to_string(planned->image_tokens) + " for its images) but the "
                                            "model's context holds " + std::to_string(facts.context_length) +
                                            "; shorten it, or use fewer or smaller images",
                                        "context_length_exceeded"));
  }
  const int64_t need = image_pixels ? planned->peak_bytes : planned->audio_peak_bytes;
  auto request = std::make_shared<ParsedRequest>(std::move(p));
  // Runs on a worker once `need` bytes are taken.
  auto run = [this, planned, request, ex, image_pixels, need, next]() {
    auto hold = std::make_shared<http::BudgetHold>(&media_budget, need);
    if (ex.client_gone()) return;
    if (ApiError e = DecodeMedia(*planned, opts.limits.media, image_pixels, &ex.gone_flag(), &request->engine.media);
        !e.ok()) {
      if (e.status != 499) SendError(ex, e);
      return;
    }
    next(std::move(*request), std::move(hold), planned->held_bytes);
  };
  http::ByteBudget::Ticket ticket = 0;
  const auto outcome = media_budget.Take(need, [this, run] { http.RunOnWorker(run); }, &ticket);
  if (outcome == http::ByteBudget::Outcome::kTooLarge) {
    ApiError e = InvalidRequest("messages",
                                "decoding this request's media needs about " + MiB(need) + ", more than the server's " +
                                    MiB(media_budget.limit()) + " media budget (--media-budget-mb); send fewer or "
                                    "smaller images or shorter audio, or ask for less detail",
                                "media_too_large");
    e.status = 413;
    return SendError(ex, e);
  }
  if (outcome == http::ByteBudget::Outcome::kTaken) return run();
  metrics.CountMediaWait();
  // Waiting: a client that leaves withdraws the request (if the bytes were granted meanwhile, the
  // continuation sees the client gone and gives them back).
  ex.OnClientGone([this, ticket] { media_budget.Cancel(ticket); });
}

}  // namespace phi4mm::server
