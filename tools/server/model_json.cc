// A loaded model as JSON (model_json.h).
#include "model_json.h"

#include <string>
#include <vector>

#include "phi4mm/kernels/isa.h"
#include "phi4mm/kernels/quant_kernels.h"

namespace phi4mm::server {

nlohmann::json ModelJson(const Model& model) {
  const ModelInfo info = model.Info();
  const ModelConfig& c = model.config();
  const TextConfig& t = c.text;
  nlohmann::json j;
  j["folder"] = info.dir;
  j["layout"] = info.layout;
  j["model_type"] = c.model_type;
  j["files"] = info.num_files;
  const Checkpoint& ckpt = model.checkpoint();
  int64_t packed = 0;
  uint64_t weight_bytes = 0;
  for (const auto& [name, tv] : ckpt.tensors()) {
    packed += tv.packed ? 1 : 0;
    weight_bytes += tv.nbytes;
  }
  j["weight_bytes"] = weight_bytes;
  if (ckpt.prequantized().empty())
    j["prequantized"] = nullptr;
  else
    j["prequantized"] = {{"quant", ckpt.prequantized()}, {"tensors", packed}};
  j["parameters"] = {{"embedding", info.params_embedding},
                     {"decoder", info.params_decoder},
                     {"vision", info.params_vision},
                     {"speech", info.params_speech},
                     {"vision_lora", info.params_vision_lora},
                     {"speech_lora", info.params_speech_lora},
                     {"other", info.params_other}};
  j["parameters_by_dtype"] = info.params_by_dtype;
  j["decoder"] = {{"layers", t.num_hidden_layers},
                  {"hidden", t.hidden_size},
                  {"heads", t.num_attention_heads},
                  {"kv_heads", t.num_key_value_heads},
                  {"head_dim", t.head_dim},
                  {"intermediate", t.intermediate_size},
                  {"vocab", t.vocab_size},
                  {"rotary_dim", t.rotary_dim()},
                  {"original_max_position_embeddings", t.original_max_position_embeddings},
                  {"rope_attention_factor", t.rope_attention_factor}};
  j["lora"] = {{"vision", {{"rank", c.vision_lora.rank}, {"alpha", c.vision_lora.alpha}}},
               {"speech", {{"rank", c.speech_lora.rank}, {"alpha", c.speech_lora.alpha}}}};
  j["context_length"] = info.context_length;
  j["kv_cache"] = {{"dtype", info.kv_dtype},
                   {"bytes_per_token", info.kv_bytes_per_token},
                   {"bytes_at_full_context", info.kv_bytes_per_token * info.context_length}};
  j["eos_token_ids"] = c.generation.eos_token_ids;
  std::vector<std::string> isas;
  for (Isa isa : AvailableIsas()) isas.push_back(IsaName(isa));
  j["kernels"] = {{"isa", IsaName(ActiveIsa())}, {"table", ActiveKernels().name}, {"available", isas}};
  return j;
}

}  // namespace phi4mm::server
