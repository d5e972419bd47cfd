// One answer being generated, the single place the token loop lives: given the logits of the
// next position, it masks them with the answer's output constraint, samples (Sampler), records the
// log-probabilities, runs the stop ids, decodes the answer's text as it streams, cuts it at a stop
// string and holds back the text that may still become one (only final text is handed out), and
// counts against max_new_tokens and the context. Session::Generate
// drives one Sequence synchronously (a batch of one); the batched engine drives one per request
// from its decoder steps. Drivers own the token vector and the KV cache; a Sequence owns what
// decides the next token and the answer's text, and with speculative decoding the draft a step
// verifies and the walk over that step's rows.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  // Ends the answer with `reason`: the result's text (cut at what was taken when cancelled or past
  // its deadline) and the closing text not yet handed out ("" when cut short).
  std::string_view Finish(FinishReason reason);

  // Speculative decoding (speculative.h): the draft the next step verifies after the last id of
  // `tokens`, from the request's prediction or its own text, else from `pool`. Its length is the
  // tuner's choice for a step of `base_rows` other rows, within `room` rows (what the driver's
  // cache holds; 0: no draft), the context and the answer's budget, on the rotary table of a cache
  // built with `long_rope` (a switch would recompute the sequence); cut before the first id the
  // output constraint would refuse.
  const std::vector<int32_t>& Propose(std::span<const int32_t> tokens, int64_t room, bool long_rope,
                                      const StepCosts& costs, int64_t base_rows, const NgramPool* pool);
  const std::vector<int32_t>& draft() const { return draft_; }
  struct Taken {
    int drafted = 0, taken = 0;          // drafted ids verified, and those the answer took
    bool from_pool = false;              // the draft came from the pool
    std::optional<FinishReason> finish;  // the answer is over: the driver calls Finish
    Status error;                        // the constraint refused a sampled id (a bug)
  };
  // Takes the logits rows [1 + draft().size(), vocab] of the step that ran the last id and the
  // draft through Next in order while each sampled id equals the drafted one, handing each step
  // with a token to `emit` (false: the consumer cancels). Every row's logits are those a one-row
  // step gives, so the answer is the one without speculation. Uses up the draft.
  Taken Take(std::span<float> rows, std::vector<int32_t>* tokens, const std::function<bool(const Step&)>& emit,
             const std::function<void(std::span<const float>)>& observe = {});

  GenerateResult& result() { return result_; }
  const GenerateResult& result() const { return result_; }

 private:
  // One row of Take: chooses the next id from `logits` [vocab] (modified in place) and appends it
  // to `tokens`. `observe`, when set, sees the logits as the model gave them, just before sampling.
  Step Next(std::span<float> logits, std::vector<int32_t>* tokens,
            const std::function<void(std::span<const float>)>& observe);

  const RotaryTables& rotary_;
  int64_t max_new_tokens_;
  int64_t context_;
  int64_t vocab_;
  size_t answer_begin_;
  std::vector<int32_t> stop_ids_;
  Sampler sampler_;
  TokenStreamDecoder decoder_;
  std::vector<std::string> stop_strings_;
  std::string text_;  // the answer's text so far (cut at a stop string)
  size_t taken_ = 0;  // of it, what was handed out
  ConstraintState constraint_;
  bool constrained_;
  GenerateResult result_;
  SpeculativeOptions speculative_;
  DraftTuner tuner_;
  std::vector<int32_t> draft_;
  bool pool_draft_ = false;
};

}  // namespace phi4mm
