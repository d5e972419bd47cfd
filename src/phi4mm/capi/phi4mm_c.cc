// The C API, a thin layer over Model, Tokenizer and Chat. Exceptions never cross it.
#include "phi4mm/capi/phi4mm_c.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "phi4mm/runtime/chat.h"

struct phi4mm_model {
  std::shared_ptr<const phi4mm::Model> model;
};
struct phi4mm_session {
  std::unique_ptr<phi4mm::Chat> chat;
  std::shared_ptr<const phi4mm::Model> model;
};

namespace {

char* CopyString(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

int Fail(const phi4mm::Status& st, char** error) {
  if (error != nullptr) *error = CopyString(st.ToString());
  return static_cast<int>(st.code());
}

int Fail(const char* message, char** error) {
  return Fail(phi4mm::InvalidArgument(message), error);
}

}  // namespace

extern "C" {

void phi4mm_default_params(phi4mm_generate_params* p) {
  if (p == nullptr) return;
  *p = phi4mm_generate_params{512, 0.0f, 0, 1.0f, 0.0f, 1.0f, 0};
}

int phi4mm_model_load(const char* dir, int num_threads, phi4mm_model** out_model, char** error) {
  if (dir == nullptr || out_model == nullptr) return Fail("phi4mm_model_load: dir and out_model are required", error);
  try {
    phi4mm::LoadOptions opts;
    opts.num_threads = num_threads;
    auto m = phi4mm::Model::Load(dir, opts);
    if (!m.ok()) return Fail(m.status(), error);
    *out_model = new phi4mm_model{std::move(m).value()};
    return 0;
  } catch (const std::exception& e) {
    return Fail(phi4mm::Internal(e.what()), error);
  }
}

void phi4mm_model_free(phi4mm_model* model) { delete model; }

int phi4mm_tokenize(const phi4mm_model* model, const char* text, int32_t** ids, size_t* n_ids, char** error) {
  if (model == nullptr || text == nullptr || ids == nullptr || n_ids == nullptr)
    return Fail("phi4mm_tokenize: model, text, ids and n_ids are required", error);
  auto r = model->model->tokenizer().Encode(text);
  if (!r.ok()) return Fail(r.status(), error);
  *n_ids = r->size();
  *ids = static_cast<int32_t*>(std::malloc(std::max<size_t>(1, r->size()) * sizeof(int32_t)));
  if (*ids == nullptr) return Fail(phi4mm::Internal("out of memory"), error);
  std::memcpy(*ids, r->data(), r->size() * sizeof(int32_t));
  return 0;
}

int phi4mm_session_new(const phi4mm_model* model, const char* system_prompt, phi4mm_session** out_session,
                       char** error) {
  if (model == nullptr || out_session == nullptr)
    return Fail("phi4mm_session_new: model and out_session are required", error);
  try {
    *out_session = new phi4mm_session{std::make_unique<phi4mm::Chat>(model->model, system_prompt ? system_prompt : ""), model->model};
    return 0;
  } catch (const std::exception& e) {
    return Fail(phi4mm::Internal(e.what()), error);
  }
}

void phi4mm_session_free(phi4mm_session* session) { delete session; }

namespace {
int Send(phi4mm_session* session, const char* user_text, const phi4mm_generate_params* params, bool json,
         const char* json_schema, phi4mm_text_callback callback, void* user_data, char** out_text, char** error) {
  phi4mm_generate_params p;
  phi4mm_default_params(&p);
  if (params != nullptr) p = *params;
  phi4mm::GenerateOptions opts;
  opts.max_new_tokens = p.max_new_tokens > 0 ? p.max_new_tokens : 512;
  opts.sampling.temperature = p.temperature;
  opts.sampling.top_k = p.top_k;
  opts.sampling.top_p = p.top_p == 0.0f ? 1.0f : p.top_p;
  opts.sampling.min_p = p.min_p;
  opts.sampling.repetition_penalty = p.repetition_penalty == 0.0f ? 1.0f : p.repetition_penalty;
  opts.sampling.seed = p.seed;
  if (json) {
    auto compiler = session->model->grammar();
    if (!compiler.ok()) return Fail(compiler.status(), error);
    auto g = json_schema != nullptr ? (*compiler)->JsonSchema(json_schema, /*strict=*/true) : (*compiler)->JsonObject();
    if (!g.ok()) return Fail(g.status(), error);
    opts.constraint.grammar = std::move(g).value();
  }
  phi4mm::StreamCallback cb;
  if (callback != nullptr)
    cb = [&](std::string_view t) { return callback(t.data(), t.size(), user_data) != 0; };
  try {
    auto r = session->chat->Send(user_text, opts, cb);
    if (!r.ok()) return Fail(r.status(), error);
    if (out_text != nullptr) *out_text = CopyString(r->text);
    return 0;
  } catch (const std::exception& e) {
    return Fail(phi4mm::Internal(e.what()), error);
  }
}

}  // namespace

int phi4mm_session_send(phi4mm_session* session, const char* user_text, const phi4mm_generate_params* params,
                        phi4mm_text_callback callback, void* user_data, char** out_text, char** error) {
  if (session == nullptr || user_text == nullptr)
    return Fail("phi4mm_session_send: session and user_text are required", error);
  return Send(session, user_text, params, false, nullptr, callback, user_data, out_text, error);
}

int phi4mm_session_send_json(phi4mm_session* session, const char* user_text, const phi4mm_generate_params* params,
                             const char* json_schema, phi4mm_text_callback callback, void* user_data,
                             char** out_text, char** error) {
  if (session == nullptr || user_text == nullptr)
    return Fail("phi4mm_session_send_json: session and user_text are required", error);
  return Send(session, user_text, params, true, json_schema, callback, user_data, out_text, error);
}

void phi4mm_free(void* p) { std::free(p); }

}  // extern "C"
