// The native side of the Python package's Model and its answer streams. A Core holds the loaded
// model and one batched Engine; every Python call that generates submits one engine request and
// gets a Stream. The engine thread only appends to the stream's queue (text, token, log-probabilities)
// and signals; the Python thread takes everything queued in one call, with the GIL released while
// it waits, so many Python threads streaming at once are batched by the engine like HTTP clients
// are. A chat stream splits its text with the server's AnswerBuilder (content, then tool calls),
// so it answers what `phi4mm serve` answers. Closing a stream cancels its request and waits until
// the engine has let go of it (its KV reservation is back in the budget when Close returns).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "phi4mm/runtime/engine.h"
#include "server/answer_builder.h"
#include "server/request.h"

namespace phi4mm::python {

struct Core {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Engine> engine;
};

class Stream {
 public:
  // What one Take returns: the answer text that became final since the last call (for a chat, its
  // content only) and the token ids generated since then.
  struct Piece {
    std::string text;
    std::vector<int32_t> tokens;
  };
  // Submits the request (preprocessing on the calling thread). `chat`: split tool calls off the
  // content. Errors are the engine's refusals (bad options, context or budget exceeded, queue full).
  static Result<std::shared_ptr<Stream>> Submit(std::shared_ptr<Core> core, server::ParsedRequest request, bool chat);
  ~Stream();

  // Blocks until something new is there or the request has ended; false once it has ended and
  // everything was taken (then `result()` holds the outcome).
  bool Take(Piece* out);
  // Cancels the request (its answer so far is kept) and waits until it has ended.
  void Close();
  // After Take returned false: the error the request ended with, or OK.
  const Status& status() const { return status_; }
  // After Take returned false: a JSON object {"text", "tokens", "finish_reason", "usage",
  // "tool_calls", "logprobs" (when asked), "cached_prompt_tokens", "time_to_first_token"}.
  std::string ResultJson() const;

 private:
  struct Shared;  // what the engine thread's callbacks and the stream share
  Stream() = default;

  std::shared_ptr<Core> core_;
  std::shared_ptr<Shared> shared_;
  RequestHandle handle_;
  bool chat_ = false, logprobs_ = false;
  int64_t dynamic_hd_ = 0;
  std::unique_ptr<server::AnswerBuilder> answer_;
  bool finished_ = false;
  Status status_;
  RequestResult result_;
  std::vector<TokenLogprobs> logprobs_seen_;
};

}  // namespace phi4mm::python
