// POST /v1/audio/transcriptions and /v1/audio/translations: OpenAI's Whisper API (multipart
// `file`, `model`, `language`, `prompt`, `response_format` json|text, `temperature`, and phi4mm's
// `max_tokens`) on the speech path: one user turn with the clip and a fixed instruction.
#include "phi4mm/tokenizer/chat_format.h"
#include "server_internal.h"

namespace phi4mm::server {

namespace {

void Transcribe(Server::Impl& s, const httplib::Request& req, httplib::Response& res, bool translate) {
  if (!req.is_multipart_form_data())
    return s.SendError(res, InvalidRequest("file", "send the audio as multipart/form-data with a 'file' field"));
  if (!req.has_file("file")) return s.SendError(res, InvalidRequest("file", "the 'file' field is required", "missing_field"));
  auto field = [&](const char* name) { return req.has_file(name) ? req.get_file_value(name).content : std::string(); };
  const std::string format = field("response_format").empty() ? "json" : field("response_format");
  if (format != "json" && format != "text")
    return s.SendError(res, NotSupported("response_format", std::string("response_format '").append(format).append(
                                                                "' is not supported (the model gives no timestamps); "
                                                                "use json or text")));
  ParsedRequest p;
  p.model = field("model");
  if (ApiError e = DecodeAudioUpload(req.get_file_value("file").content, s.opts.limits.media, "file",
                                     &p.engine.media.audios.emplace_back());
      !e.ok())
    return s.SendError(res, e);
  const std::string temp = field("temperature");
  if (!temp.empty()) {
    char* end = nullptr;
    const double t = std::strtod(temp.c_str(), &end);
    if (*end != '\0' || !(t >= 0.0 && t <= 2.0))
      return s.SendError(res, InvalidRequest("temperature", "temperature must be a number between 0 and 2"));
    p.engine.generate.sampling.temperature = static_cast<float>(t);
  }
  std::string instruction = translate ? s.opts.translate_prompt : s.opts.transcribe_prompt;
  if (const std::string extra = field("prompt"); !extra.empty()) instruction.append(" ").append(extra);
  std::vector<ChatMessage> msgs = {{"user", "<|audio_1|>\n" + instruction, std::nullopt}};
  auto rendered = RenderChatPrompt(msgs, true);
  if (!rendered.ok()) return s.SendError(res, FromStatus(rendered.status()));
  p.engine.prompt = std::move(rendered).value();
  p.engine.generate.max_new_tokens = s.opts.limits.default_max_tokens;
  if (const std::string mt = field("max_tokens"); !mt.empty()) {  // phi4mm extension
    char* end = nullptr;
    const long long n = std::strtoll(mt.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > 1 << 20)
      return s.SendError(res, InvalidRequest("max_tokens", "max_tokens must be a positive integer"));
    p.engine.generate.max_new_tokens = n;
  }
  OutputFormat f;
  f.kind = OutputFormat::kTranscription;
  f.text_only = format == "text";
  s.Generate(std::move(p), f, res);
}

}  // namespace

void InstallAudioRoutes(Server::Impl& s) {
  s.http.Post("/v1/audio/transcriptions",
              [&s](const httplib::Request& req, httplib::Response& res) { Transcribe(s, req, res, false); });
  s.http.Post("/v1/audio/translations",
              [&s](const httplib::Request& req, httplib::Response& res) { Transcribe(s, req, res, true); });
}

}  // namespace phi4mm::server
