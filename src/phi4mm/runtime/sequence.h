// One answer being generated, the single place the token loop lives: given the logits of the
// next position, it masks them with the answer's output constraint, samples (Sampler), records the
// log-probabilities, runs the stop ids, the stop strings and the hold-back of text that may still
// become one (AnswerStream), and counts against max_new_tokens and the context. Session::Generate
// drives one Sequence synchronously (a batch of one); the batched engine drives one per request
// from its decoder steps. Drivers own the token vector and the KV cache; a Sequence owns what
// decides the next token and the answer's text.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "phi4mm/runtime/answer_stream.h"
#include "phi4mm/runtime/output_constraint.h"
#include "phi4mm/runtime/sampler.h"
#include "phi4mm/runtime/session.h"

namespace phi4mm {

class Sequence {
 public:
  // `prompt_length`: how many ids of the token vector precede this answer (they count for the
  // repetition penalty, not for the frequency and presence penalties).
  Sequence(const Model& model, const GenerateOptions& opts, size_t prompt_length);

  struct Step {
    int32_t token = -1;                       // the id chosen (-1: none, the answer ended before sampling)
    std::string_view text;                    // answer text that became final with it
    const TokenLogprobs* logprobs = nullptr;  // when the options ask for them
    bool stream = false;                      // hand `token`/`text` to the caller (not a stop id or stop string)
    std::optional<FinishReason> finish;       // the answer is over (after streaming this step)
    Status error;                             // the constraint refused the sampled id (a bug)
  };
  // Chooses the next id from `logits` [vocab] (modified in place) and appends it to `tokens`.
  // `observe`, when set, sees the logits as the model gave them, just before a sampling.
  Step Next(std::span<float> logits, std::vector<int32_t>* tokens,
            const std::function<void(std::span<const float>)>& observe = {});
  // Ends the answer with `reason`: the result's text (cut at what was taken when cancelled or past
  // its deadline) and the closing text not yet handed out ("" when cut short).
  std::string_view Finish(FinishReason reason);

  // How many leading ids of a draft the output constraint allows from here (speculative decoding
  // verifies only those).
  size_t DraftAllowed(std::span<const int32_t> draft) const {
    return constrained_ ? constraint_.AllowedPrefix(draft) : draft.size();
  }

  GenerateResult& result() { return result_; }
  const GenerateResult& result() const { return result_; }

 private:
  int64_t max_new_tokens_;
  int64_t context_;
  std::vector<int32_t> stop_ids_;
  Sampler sampler_;
  AnswerStream answer_;
  ConstraintState constraint_;
  bool constrained_;
  GenerateResult result_;
};

}  // namespace phi4mm
