// POST /v1/audio/transcriptions and /v1/audio/translations: OpenAI's Whisper API (multipart
// `file`, `model`, `language`, `prompt`, `response_format` json|text, `temperature`, and phi4mm's
// `max_tokens`) on the speech path: one user turn with the clip and a fixed instruction.
#include "phi4mm/tokenizer/chat_format.h"
#include "http/multipart.h"
#include "server_internal.h"

namespace phi4mm::server {

namespace {

void Transcribe(Server::Impl& s, http::Request& req, const http::Exchange& ex, bool translate) {
  const std::string_view type = req.header("content-type");
  if (!http::IsMultipartFormData(type))
    return s.SendError(ex, InvalidRequest("file", "send the audio as multipart/form-data with a 'file' field"));
  auto parts = http::ParseMultipart(req.body, type);
  if (!parts.ok()) return s.SendError(ex, InvalidRequest("file", parts.status().message()));
  const http::FormPart* file = http::FindPart(*parts, "file");
  if (file == nullptr) return s.SendError(ex, InvalidRequest("file", "the 'file' field is required", "missing_field"));
  auto field = [&](const char* name) {
    const http::FormPart* p = http::FindPart(*parts, name);
    return p ? std::string(p->data) : std::string();
  };
  const std::string format = field("response_format").empty() ? "json" : field("response_format");
  if (format != "json" && format != "text")
    return s.SendError(ex, NotSupported("response_format", std::string("response_format '").append(format).append(
                                                               "' is not supported (the model gives no timestamps); "
                                                               "use json or text")));
  ParsedRequest p;
  p.model = field("model");
  MediaSource upload;
  upload.kind = MediaSource::kAudio;
  upload.param = "file";
  upload.data = std::string(file->data);
  upload.uploaded = true;
  p.media_sources.push_back(std::move(upload));
  const std::string temp = field("temperature");
  if (!temp.empty()) {
    char* end = nullptr;
    const double t = std::strtod(temp.c_str(), &end);
    if (*end != '\0' || !(t >= 0.0 && t <= 2.0))
      return s.SendError(ex, InvalidRequest("temperature", "temperature must be a number between 0 and 2"));
    p.engine.generate.sampling.temperature = static_cast<float>(t);
  }
  std::string instruction = translate ? s.opts.translate_prompt : s.opts.transcribe_prompt;
  if (const std::string extra = field("prompt"); !extra.empty()) instruction.append(" ").append(extra);
  std::vector<ChatMessage> msgs = {{"user", "<|audio_1|>\n" + instruction, std::nullopt}};
  auto rendered = RenderChatPrompt(msgs, true);
  if (!rendered.ok()) return s.SendError(ex, FromStatus(rendered.status()));
  p.engine.prompt = std::move(rendered).value();
  p.engine.generate.max_new_tokens = s.opts.limits.default_max_tokens;
  if (const std::string mt = field("max_tokens"); !mt.empty()) {  // phi4mm extension
    char* end = nullptr;
    const long long n = std::strtoll(mt.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > 1 << 20)
      return s.SendError(ex, InvalidRequest("max_tokens", "max_tokens must be a positive integer"));
    p.engine.generate.max_new_tokens = n;
  }
  OutputFormat f;
  f.kind = OutputFormat::kTranscription;
  f.text_only = format == "text";
  ModelFacts facts;
  {
    std::shared_lock<std::shared_mutex> l(s.model_mu);
    if (!s.model) return s.SendError(ex, Unavailable("the server is shutting down", 5));
    facts = s.Facts();
  }
  req.body.Clear();  // the upload was copied into its source
  s.AdmitMedia(std::move(p), facts, ex, /*counting=*/false,
               [&s, f, ex](ParsedRequest admitted, std::shared_ptr<http::BudgetHold> hold, int64_t held) {
                 s.Generate(std::move(admitted), f, ex, std::move(hold), held);
               });
}

}  // namespace

void InstallAudioRoutes(Server::Impl& s) {
  using Run = http::Server::Run;
  s.http.Route("POST", "/v1/audio/transcriptions", Run::kWorker,
               [&s](http::Request& req, http::Exchange ex) { Transcribe(s, req, ex, false); });
  s.http.Route("POST", "/v1/audio/translations", Run::kWorker,
               [&s](http::Request& req, http::Exchange ex) { Transcribe(s, req, ex, true); });
}

}  // namespace phi4mm::server
