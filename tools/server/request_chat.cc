// /v1/chat/completions and /v1/completions bodies -> EngineRequest (request.h): messages and
// their content parts, media placeholders, tools, detail -> dynamic-HD, then the generation fields.
#include <algorithm>

#include "phi4mm/runtime/chat.h"
#include "phi4mm/tokenizer/chat_format.h"
#include "request_internal.h"
#include "tool_calls.h"

namespace phi4mm::server {

namespace {

constexpr std::string_view kChatFields[] = {
    "messages", "model", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_tokens",
    "max_completion_tokens", "n", "presence_penalty", "response_format", "seed", "stop", "stream",
    "stream_options", "temperature", "top_p", "tools", "tool_choice", "parallel_tool_calls", "user",
    "metadata", "store", "service_tier", "reasoning_effort", "modalities", "audio", "prediction", "functions",
    "function_call", "web_search_options", "top_k", "min_p", "repetition_penalty", "dynamic_hd", "speculative"};
constexpr std::string_view kCompletionFields[] = {
    "prompt", "model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty",
    "seed", "stop", "stream", "stream_options", "temperature", "top_p", "user", "suffix", "echo", "best_of", "response_format",
    "top_k", "min_p", "repetition_penalty", "max_completion_tokens", "prediction", "speculative"};

struct Builder {
  const ServerLimits& limits;
  const ModelFacts& facts;
  ParsedRequest* out;
  int64_t images = 0, audios = 0;  // media parts so far, over the whole conversation
  int64_t dynamic_hd = 0;        // from detail / the extension; 0 = not set by any image
  bool any_detail_high = false;
};

int64_t Effective(int64_t v, int64_t fallback) { return v > 0 ? v : fallback; }

// The crop limit one image asks for with its `detail`.
int64_t DetailToDynamicHd(const std::string& detail, const ServerLimits& l, const ModelFacts& f,
                          const std::string& path) {
  const int64_t dflt = Effective(l.dynamic_hd, f.checkpoint_dynamic_hd);
  const int64_t high = Effective(l.max_dynamic_hd, f.checkpoint_dynamic_hd);
  if (detail == "auto") return dflt;
  if (detail == "low") return 1;
  if (detail == "high") return high;
  Fail(path, path + " must be \"low\", \"high\" or \"auto\", got \"" + detail + "\"", "invalid_value");
}

// Text of a content field that may only hold text (system, assistant, tool messages).
std::string TextOnly(const Json& content, const std::string& path, const std::string& role) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) Fail(path, path + " must be a string or an array of parts, got " + TypeName(content), "invalid_type");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pp = Index(path, i);
    if (!part.is_object()) Fail(pp, pp + " must be an object, got " + TypeName(part), "invalid_type");
    const std::string type = ReqString(part, "type", pp);
    if (type != "text")
      Fail(Join(pp, "type"), role + " messages may only hold text parts; images and audio go in user messages",
           "invalid_value");
    if (!text.empty()) text += "\n";
    text += ReqString(part, "text", pp);
  }
  return text;
}

// A user message's content: text parts joined with "\n", media collected in order (decoded later,
// once their memory is admitted: media_admission.h), placeholders prepended (numbered over the
// whole conversation) unless the text has its own.
std::string UserContent(const Json& content, const std::string& path, Builder& b) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) Fail(path, path + " must be a string or an array of parts, got " + TypeName(content), "invalid_type");
  std::vector<MediaSource>& sources = b.out->media_sources;
  std::string text;
  size_t images = 0, audios = 0;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pp = Index(path, i);
    if (!part.is_object()) Fail(pp, pp + " must be an object, got " + TypeName(part), "invalid_type");
    const std::string type = ReqString(part, "type", pp);
    if (type == "text") {
      if (!text.empty()) text += "\n";
      text += ReqString(part, "text", pp);
      continue;
    }
    if (type == "image_url") {
      const Json* iu = OptObject(part, "image_url", pp);
      if (!iu) Fail(Join(pp, "image_url"), Join(pp, "image_url") + " is required", "missing_field");
      const std::string ip = Join(pp, "image_url");
      const std::string url = ReqString(*iu, "url", ip);
      const std::string detail = OptString(*iu, "detail", ip).value_or("auto");
      const int64_t dyn = DetailToDynamicHd(detail, b.limits, b.facts, Join(ip, "detail"));
      b.any_detail_high = b.any_detail_high || detail == "high";
      // One crop limit serves the whole request (the engine preprocesses all images alike): the
      // largest any image asks for.
      b.dynamic_hd = std::max(b.dynamic_hd, dyn);
      if (b.images >= b.limits.max_images)
        Fail(pp, "a request may hold at most " + std::to_string(b.limits.max_images) + " images (--max-images)",
             "too_many_images");
      MediaSource src;
      src.kind = MediaSource::kImage;
      src.param = Join(ip, "url");
      src.url = url;
      sources.push_back(std::move(src));
      ++b.images;
      ++images;
    } else if (type == "input_audio" || type == "audio_url") {
      const Json* ia = OptObject(part, type, pp);
      if (!ia) Fail(Join(pp, type), Join(pp, type) + " is required", "missing_field");
      const std::string ap = Join(pp, type);
      if (b.audios >= b.limits.max_audios)
        Fail(pp, "a request may hold at most " + std::to_string(b.limits.max_audios) + " audio clips (--max-audios)",
             "too_many_audios");
      MediaSource src;
      src.kind = MediaSource::kAudio;
      if (type == "input_audio") {
        src.data = ReqString(*ia, "data", ap);
        src.format = OptString(*ia, "format", ap).value_or("");
        src.param = ap;
        src.inline_data = true;
        if (ApiError e = CheckAudioFormat(src.format, ap); !e.ok()) throw FieldError{e};
      } else {
        src.url = ReqString(*ia, "url", ap);
        src.param = Join(ap, "url");
      }
      sources.push_back(std::move(src));
      ++b.audios;
      ++audios;
    } else {
      Fail(Join(pp, "type"), "unsupported content part type \"" + type +
                                 "\"; supported: text, image_url, input_audio, audio_url", "invalid_value");
    }
  }
  const MediaPlaceholders ph = RewriteMediaPlaceholders(text);
  if (!ph.image_numbers.empty() || !ph.audio_numbers.empty() || (images == 0 && audios == 0)) return text;
  std::string prefix;
  const size_t first_image = static_cast<size_t>(b.images) - images, first_audio = static_cast<size_t>(b.audios) - audios;
  for (size_t k = 0; k < images; ++k) prefix += "<|image_" + std::to_string(first_image + k + 1) + "|>\n";
  for (size_t k = 0; k < audios; ++k) prefix += "<|audio_" + std::to_string(first_audio + k + 1) + "|>\n";
  return prefix + text;
}

void ValidateTools(const Json& tools) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = Index("tools", i);
    const Json& t = tools[i];
    if (!t.is_object()) Fail(p, p + " must be an object, got " + TypeName(t), "invalid_type");
    const std::string type = OptString(t, "type", p).value_or("function");
    if (type != "function") Fail(Join(p, "type"), "only function tools are supported, got \"" + type + "\"", "not_supported");
    const Json* f = OptObject(t, "function", p);
    if (!f) Fail(Join(p, "function"), Join(p, "function") + " is required", "missing_field");
    const std::string fp = Join(p, "function");
    if (ReqString(*f, "name", fp).empty()) Fail(Join(fp, "name"), "a tool needs a non-empty name", "invalid_value");
    (void)OptString(*f, "description", fp);
    (void)OptObject(*f, "parameters", fp);
  }
}

void ValidateToolCalls(const Json& calls, const std::string& path) {
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string p = Index(path, i);
    if (!calls[i].is_object()) Fail(p, p + " must be an object", "invalid_type");
    const Json* f = OptObject(calls[i], "function", p);
    if (!f) Fail(Join(p, "function"), Join(p, "function") + " is required", "missing_field");
    (void)ReqString(*f, "name", Join(p, "function"));
    (void)OptString(*f, "arguments", Join(p, "function"));
  }
}

void BuildChat(const Json& body, Builder& b) {
  ParsedRequest* out = b.out;
  const Json* messages = OptArray(body, "messages", "");
  if (!messages || messages->empty()) Fail("messages", "messages must be a non-empty array", "missing_field");

  // Tools and tool_choice.
  const Json* tools = OptArray(body, "tools", "");
  if (tools) ValidateTools(*tools);
  bool render_tools = tools && !tools->empty();
  ParseToolChoice(body, tools, &render_tools, out);

  std::vector<ChatMessage> chat;
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string mp = Index("messages", i);
    const Json& m = (*messages)[i];
    if (!m.is_object()) Fail(mp, mp + " must be an object, got " + TypeName(m), "invalid_type");
    std::string role = ReqString(m, "role", mp);
    const Json* content = Member(m, "content");
    const std::string cp = Join(mp, "content");
    ChatMessage cm;
    if (role == "developer") role = "system";
    if (role == "system" || role == "tool") {
      if (!content) Fail(cp, cp + " is required", "missing_field");
      cm.content = TextOnly(*content, cp, role);
      if (role == "tool") (void)OptString(m, "tool_call_id", mp);
    } else if (role == "user") {
      if (!content) Fail(cp, cp + " is required", "missing_field");
      cm.content = UserContent(*content, cp, b);
    } else if (role == "assistant") {
      cm.content = content ? TextOnly(*content, cp, role) : "";
      if (const Json* calls = OptArray(m, "tool_calls", mp)) {
        ValidateToolCalls(*calls, Join(mp, "tool_calls"));
        if (!calls->empty()) cm.content += RenderToolCalls(*calls);
      }
    } else {
      Fail(Join(mp, "role"), "unsupported role \"" + role + "\"; supported: system, developer, user, assistant, tool",
           "invalid_value");
    }
    (void)OptString(m, "name", mp);
    cm.role = role;
    chat.push_back(std::move(cm));
  }
  if (render_tools) {
    auto sys = std::find_if(chat.begin(), chat.end(), [](const ChatMessage& c) { return c.role == "system"; });
    if (sys == chat.end()) sys = chat.insert(chat.begin(), ChatMessage{"system", "You are a helpful assistant with some tools.", std::nullopt});
    sys->tools = RenderToolList(*tools);
    out->tools = true;
  }
  auto rendered = RenderChatPrompt(chat, true);
  if (!rendered.ok()) Fail("messages", rendered.status().message(), "invalid_value");
  out->engine.prompt = std::move(rendered).value();

  // Crop limit: the dynamic_hd extension wins, clamped to the server's maximum.
  const int64_t cap = Effective(b.limits.max_dynamic_hd, b.facts.checkpoint_dynamic_hd);
  int64_t dyn = b.dynamic_hd > 0 ? b.dynamic_hd : Effective(b.limits.dynamic_hd, b.facts.checkpoint_dynamic_hd);
  if (auto ext = OptInt(body, "dynamic_hd", "", 1, 1 << 16)) dyn = std::min(*ext, cap);
  out->dynamic_hd = std::min(dyn, cap);
  out->engine.prompt_options.dynamic_hd = out->dynamic_hd;
}

}  // namespace

ApiError ParseChatRequest(const Json& body, const ServerLimits& limits, const ModelFacts& facts, ParsedRequest* out) {
  try {
    ParseGeneration(body, limits, facts, /*chat=*/true, out);
    Builder b{limits, facts, out};
    BuildChat(body, b);
    CollectIgnored(body, kChatFields, out);
  } catch (const FieldError& e) {
    return e.error;
  } catch (const Json::exception& e) {
    return InvalidRequest("", std::string("malformed request: ") + e.what(), "invalid_value");
  }
  return {};
}

ApiError ParseCompletionRequest(const Json& body, const ServerLimits& limits, const ModelFacts& facts,
                                ParsedRequest* out) {
  try {
    ParseGeneration(body, limits, facts, /*chat=*/false, out);
    const Json* prompt = Member(body, "prompt");
    if (!prompt) Fail("prompt", "prompt is required", "missing_field");
    const Json* p = prompt;
    if (p->is_array()) {
      if (p->size() != 1 || !(*p)[0].is_string()) {
        // A list of token ids is the other accepted form.
        bool ids = !p->empty();
        for (const Json& v : *p) ids = ids && v.is_number_integer();
        if (!ids) Fail("prompt", "prompt must be a string, an array of one string, or an array of token ids", "invalid_type");
        for (const Json& v : *p) {
          const int64_t id = v.get<int64_t>();
          if (id < 0 || id >= facts.vocab_size)
            Fail("prompt", "prompt token id " + std::to_string(id) + " is outside [0, " + std::to_string(facts.vocab_size) + ")", "out_of_range");
          out->engine.prompt_ids.push_back(static_cast<int32_t>(id));
        }
      } else {
        p = &(*p)[0];
      }
    }
    if (p->is_string()) {
      out->engine.prompt = p->get<std::string>();
      if (out->engine.prompt.empty()) Fail("prompt", "prompt must not be empty", "invalid_value");
    } else if (out->engine.prompt_ids.empty()) {
      Fail("prompt", "prompt must be a string, got " + TypeName(*p), "invalid_type");
    }
    CollectIgnored(body, kCompletionFields, out);
  } catch (const FieldError& e) {
    return e.error;
  } catch (const Json::exception& e) {
    return InvalidRequest("", std::string("malformed request: ") + e.what(), "invalid_value");
  }
  return {};
}

}  // namespace phi4mm::server
