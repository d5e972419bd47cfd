// The `phi4mm._phi4mm` extension module (nanobind): the native half of the Python package. It
// exposes a Core (a loaded model and its batched engine) and its Streams; the Python half
// (python/phi4mm) turns messages and media objects into the request body and media items this
// takes, and JSON text carries structured results across (parsed with the json module). The GIL
// is released for everything that computes or waits: loading, preprocessing, submitting, waiting
// for tokens, closing a stream. Errors become exceptions carrying the engine's message:
// ValueError for the caller's input, FileNotFoundError for a missing path, RuntimeError otherwise.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "phi4mm/kernels/attention.h"
#include "phi4mm/kernels/weight_matrix.h"
#include "phi4mm/runtime/media.h"
#include "py_request.h"
#include "py_stream.h"
#include "server/model_json.h"
#include "server/response.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace phi4mm::python {
namespace {

[[noreturn]] void Raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

[[noreturn]] void Raise(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnsupported:
    case StatusCode::kDataLoss:
      Raise(PyExc_ValueError, st.message());
    case StatusCode::kNotFound:
      Raise(PyExc_FileNotFoundError, st.message());
    default:
      Raise(PyExc_RuntimeError, st.message());
  }
}

[[noreturn]] void Raise(const RequestError& e) {
  Raise(e.status >= 400 && e.status < 500 && e.status != 429 ? PyExc_ValueError : PyExc_RuntimeError, e.message);
}

// The media list the package builds: (kind, data, width, height, dtype, channels, sample_rate,
// label) tuples, kind one of "pixels", "image", "samples", "audio".
std::vector<MediaItem> MediaItems(const nb::list& media) {
  std::vector<MediaItem> items;
  for (nb::handle h : media) {
    auto t = nb::cast<nb::tuple>(h);
    if (t.size() != 8) Raise(PyExc_TypeError, "a media item is an 8-tuple");
    MediaItem m;
    const auto kind = nb::cast<std::string>(t[0]);
    if (kind == "pixels")
      m.kind = MediaItem::Kind::kImagePixels;
    else if (kind == "image")
      m.kind = MediaItem::Kind::kImageBytes;
    else if (kind == "samples")
      m.kind = MediaItem::Kind::kAudioSamples;
    else if (kind == "audio")
      m.kind = MediaItem::Kind::kAudioBytes;
    else
      Raise(PyExc_ValueError, "unknown media item kind " + kind);
    auto data = nb::cast<nb::bytes>(t[1]);
    m.data.assign(data.c_str(), data.size());
    m.width = nb::cast<int64_t>(t[2]);
    m.height = nb::cast<int64_t>(t[3]);
    m.dtype = nb::cast<std::string>(t[4]);
    m.channels = nb::cast<int64_t>(t[5]);
    m.sample_rate = nb::cast<int64_t>(t[6]);
    m.label = nb::cast<std::string>(t[7]);
    items.push_back(std::move(m));
  }
  return items;
}

std::shared_ptr<Core> Load(const std::string& path, const std::string& quant, int threads, const std::string& kv_dtype,
                           int64_t max_running, int64_t max_queue, int64_t kv_budget_bytes, int64_t prefill_chunk) {
  LoadOptions lo;
  lo.num_threads = threads;
  if (!quant.empty()) {
    const std::optional<QuantMode> q = ParseQuantMode(quant);
    if (!q) Raise(PyExc_ValueError, "quant must be one of none, bf16, q8, q4; got \"" + quant + "\"");
    lo.quant = *q;
  }
  if (!kv_dtype.empty()) {
    const std::optional<KvDType> kv = ParseKvDType(kv_dtype);
    if (!kv) Raise(PyExc_ValueError, "kv_dtype must be one of f32, f16, q8; got \"" + kv_dtype + "\"");
    lo.kv_dtype = *kv;
  }
  EngineOptions eo;
  if (max_running > 0) eo.max_running = max_running;
  if (max_queue > 0) eo.max_queue = max_queue;
  eo.kv_budget_bytes = kv_budget_bytes;
  if (prefill_chunk > 0) eo.prefill_chunk = prefill_chunk;
  auto core = std::make_shared<Core>();
  Status st;
  {
    nb::gil_scoped_release release;
    auto model = Model::Load(path, lo);
    if (!model.ok()) {
      st = model.status();
    } else {
      core->model = *model;
      auto engine = Engine::Start(core->model, eo);
      if (engine.ok())
        core->engine = std::move(engine).value();
      else
        st = engine.status();
    }
  }
  if (!st.ok()) Raise(st);
  return core;
}

std::shared_ptr<Stream> Submit(const std::shared_ptr<Core>& core, const std::string& body, std::vector<MediaItem> media,
                               bool chat) {
  RequestError err;
  Result<std::shared_ptr<Stream>> stream = Status::Ok();
  {
    nb::gil_scoped_release release;
    server::ParsedRequest p;
    err = chat ? BuildChatRequest(*core->model, body, std::move(media), &p)
               : BuildCompletionRequest(*core->model, body, &p);
    if (err.ok()) stream = Stream::Submit(core, std::move(p), chat);
  }
  if (!err.ok()) Raise(err);
  if (!stream.ok()) Raise(stream.status());
  return *stream;
}

std::string StatsJson(const Core& core) {
  const EngineStats s = core.engine->stats();
  server::Json j;
  j["running"] = s.running;
  j["waiting"] = s.waiting;
  j["kv_reserved_bytes"] = s.kv_reserved_bytes;
  j["kv_budget_bytes"] = s.kv_budget_bytes;
  j["steps"] = s.steps;
  j["batch_rows"] = s.batch_rows;
  j["prefill_rows"] = s.prefill_rows;
  j["decode_rows"] = s.decode_rows;
  j["images_encoded"] = s.images_encoded;
  j["audios_encoded"] = s.audios_encoded;
  j["finished"] = s.finished;
  j["cancelled"] = s.cancelled;
  j["expired"] = s.expired;
  j["refused"] = s.refused;
  j["preempted"] = s.preempted;
  j["prefix_cache"] = {{"lookups", s.prefix.lookups},
                       {"hits", s.prefix.hits},
                       {"hit_tokens", s.prefix.hit_tokens},
                       {"entries", s.prefix.entries},
                       {"bytes", s.prefix.bytes}};
  j["media_cache"] = {
      {"hits", s.media.hits}, {"misses", s.media.misses}, {"entries", s.media.entries}, {"bytes", s.media.bytes}};
  return j.dump();
}

std::string InfoJson(const Core& core) {
  nlohmann::json j = server::ModelJson(*core.model);
  j["threads"] = core.model->pool() ? core.model->pool()->num_threads() : 1;
  return j.dump();
}

std::string CountJson(const Core& core, const std::string& body, std::vector<MediaItem> media) {
  RequestError err;
  Result<PromptCount> count = Status::Ok();
  server::ParsedRequest p;
  {
    nb::gil_scoped_release release;
    err = BuildChatRequest(*core.model, body, std::move(media), &p);
    if (err.ok())
      count = CountPrompt(core.model->config(), core.model->tokenizer(), p.engine.prompt, p.engine.media,
                          p.engine.prompt_options);
  }
  if (!err.ok()) Raise(err);
  if (!count.ok()) Raise(count.status());
  server::Json j = {
      {"total_tokens", count->total_tokens},
      {"text_tokens", count->text_tokens},
      {"image_tokens", count->image_tokens},
      {"audio_tokens", count->audio_tokens},
      {"lora_mode", LoraModeName(LoraModeForInputs(!p.engine.media.images.empty(), !p.engine.media.audios.empty()))},
      {"context_length", core.model->context_length()}};
  if (!p.engine.media.images.empty()) j["dynamic_hd"] = p.dynamic_hd;
  return j.dump();
}

}  // namespace
}  // namespace phi4mm::python

NB_MODULE(_phi4mm, m) {  // NOLINT(performance-unnecessary-value-param): the macro passes the module by value
  using namespace phi4mm;
  using namespace phi4mm::python;
  m.doc() = "The native half of phi4mm: a loaded model with its batched engine, and answer streams.";

  nb::class_<Core>(m, "Core", "A loaded model and its batched engine (use phi4mm.Model).")
      .def_static("load", &Load, "path"_a, "quant"_a = "", "threads"_a = 0, "kv_dtype"_a = "", "max_running"_a = 0,
                  "max_queue"_a = 0, "kv_budget_bytes"_a = 0, "prefill_chunk"_a = 0,
                  "Loads a checkpoint folder and starts its engine.")
      .def(
          "chat",
          [](const std::shared_ptr<Core>& c, const std::string& body, const nb::list& media) {
            return Submit(c, body, MediaItems(media), true);
          },
          "body"_a, "media"_a, "Submits a chat request body (JSON text) with its media items.")
      .def(
          "complete",
          [](const std::shared_ptr<Core>& c, const std::string& body) { return Submit(c, body, {}, false); }, "body"_a,
          "Submits a completion request body (JSON text; prompt as text or token ids).")
      .def(
          "count",
          [](const Core& c, const std::string& body, const nb::list& media) {
            return CountJson(c, body, MediaItems(media));
          },
          "body"_a, "media"_a, "The prompt's tokens by kind (JSON text), without running an encoder.")
      .def(
          "tokenize",
          [](const Core& c, const std::string& text) {
            auto ids = c.model->tokenizer().Encode(text);
            if (!ids.ok()) Raise(ids.status());
            return *ids;
          },
          "text"_a, "Token ids of the text (special tokens in it recognised, nothing added).")
      .def(
          "detokenize",
          [](const Core& c, const std::vector<int32_t>& ids, bool skip_special) {
            const std::string text = c.model->tokenizer().Decode(ids, skip_special);
            return nb::bytes(text.data(), text.size());
          },
          "ids"_a, "skip_special"_a = false, "The UTF-8 bytes of the ids.")
      .def("info", &InfoJson, "What `phi4mm info --json` prints, and the compute threads (JSON text).")
      .def("stats", &StatsJson, "The engine's counters (JSON text).");

  nb::class_<Stream>(m, "Stream", "One request's answer as it is generated.")
      .def(
          "take",
          [](Stream& s) -> nb::object {
            Stream::Piece piece;
            bool more;
            {
              nb::gil_scoped_release release;
              more = s.Take(&piece);
            }
            if (!more) {
              if (!s.status().ok()) Raise(s.status());
              return nb::none();
            }
            return nb::make_tuple(nb::bytes(piece.text.data(), piece.text.size()), nb::cast(piece.tokens));
          },
          "Blocks for the next piece: (utf-8 bytes, token ids), or None once the answer has ended.")
      .def(
          "close",
          [](Stream& s) {
            nb::gil_scoped_release release;
            s.Close();
          },
          "Cancels the request and waits until the engine has let go of it.")
      .def("result", &Stream::ResultJson, "The outcome (JSON text), once take() has returned None.");
}
