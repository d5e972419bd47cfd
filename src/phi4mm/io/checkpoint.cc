// Checkpoint folder discovery, shard index parsing and name canonicalisation.
#include "phi4mm/io/checkpoint.h"

#include <set>

#include <nlohmann/json.hpp>

#include "phi4mm/base/file_map.h"

namespace phi4mm {

namespace {

bool StartsWith(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

void ReplaceFirst(std::string* s, const std::string& from, const std::string& to) {
  const size_t pos = s->find(from);
  if (pos != std::string::npos) s->replace(pos, from.size(), to);
}

}  // namespace

std::string CanonicalNameFromOriginal(const std::string& name) {
  std::string n = name;
  ReplaceFirst(&n, ".base_layer.", ".");
  const std::string img = "model.embed_tokens_extend.image_embed.";
  const std::string aud = "model.embed_tokens_extend.audio_embed.";
  if (StartsWith(n, img)) {
    std::string rest = n.substr(img.size());
    if (StartsWith(rest, "img_projection.0.")) rest = "img_projection_up." + rest.substr(17);
    else if (StartsWith(rest, "img_projection.2.")) rest = "img_projection_down." + rest.substr(17);
    else if (rest == "glb_GN") rest = "global_img_feature_extensor";
    else if (rest == "sub_GN") rest = "sub_img_feature_extensor";
    return img + rest;
  }
  if (StartsWith(n, aud)) {
    std::string rest = n.substr(aud.size());
    static const std::pair<const char*, const char*> kProj[] = {
        {"audio_projection.speech.0.", "up_proj_for_speech."},
        {"audio_projection.speech.2.", "down_proj_for_speech."},
        {"audio_projection.vision.0.", "up_proj_for_vision_speech."},
        {"audio_projection.vision.2.", "down_proj_for_vision_speech."}};
    for (const auto& [from, to] : kProj)
      if (StartsWith(rest, from)) return aud + to + rest.substr(std::string(from).size());
    if (StartsWith(rest, "encoder.encoders.")) {
      ReplaceFirst(&rest, ".net.0.linear.", ".gate_up_proj.");
      ReplaceFirst(&rest, ".net.2.", ".down_proj.");
      ReplaceFirst(&rest, ".self_attn.linear_q.", ".self_attn.q_proj.");
      ReplaceFirst(&rest, ".self_attn.linear_k.", ".self_attn.k_proj.");
      ReplaceFirst(&rest, ".self_attn.linear_v.", ".self_attn.v_proj.");
      ReplaceFirst(&rest, ".self_attn.linear_out.", ".self_attn.o_proj.");
    }
    return aud + rest;
  }
  return n;
}

std::string CanonicalNameFromPeft(const std::string& name, const std::string& adapter) {
  std::string n = name;
  if (StartsWith(n, "base_model.model.")) n = n.substr(17);
  for (const char* ab : {".lora_A.", ".lora_B."}) {
    const std::string from = std::string(ab) + "weight";
    if (n.size() >= from.size() && n.compare(n.size() - from.size(), from.size(), from) == 0)
      return n.substr(0, n.size() - from.size()) + ab + adapter + ".weight";
  }
  return n;
}

namespace {

std::string Canonical(const std::string& name, const std::string& adapter, CheckpointLayout layout) {
  if (!adapter.empty()) return CanonicalNameFromPeft(name, adapter);
  if (layout == CheckpointLayout::kOriginal) return CanonicalNameFromOriginal(name);
  return name;
}

}  // namespace

std::string Checkpoint::CanonicalNameIn(size_t file_index, const std::string& stored_name) const {
  return Canonical(stored_name, file_index < file_adapters_.size() ? file_adapters_[file_index] : "", layout_);
}

Status Checkpoint::AddFile(const std::string& path, const std::string& adapter) {
  PHI4MM_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  const std::string& quant = f.packed_quant();
  if (!files_.empty() && quant != prequantized_)
    return DataLoss("'" + path + "' " +
                    (quant.empty() ? std::string("is not pre-quantized") : "was pre-quantized with --quant " + quant) +
                    " but '" + files_.front().path() + "' " +
                    (prequantized_.empty() ? std::string("is not") : "was with --quant " + prequantized_) +
                    ": the folder mixes files of different checkpoints; quantize the original again");
  prequantized_ = quant;
  for (const auto& [name, view] : f.tensors()) {
    const std::string canonical = Canonical(name, adapter, layout_);
    if (tensors_.count(canonical))
      return DataLoss("tensor '" + name + "' in '" + path + "' is also stored in '" + tensors_[canonical].file +
                      "' (duplicate tensor across shards)");
    tensors_.emplace(canonical, view);
    if (canonical != name) source_names_.emplace(canonical, name);
  }
  files_.push_back(std::move(f));
  file_adapters_.push_back(adapter);
  return Status::Ok();
}

Result<Checkpoint> Checkpoint::Open(const std::string& dir, CheckpointLayout layout) {
  Checkpoint c;
  c.dir_ = dir;
  c.layout_ = layout;
  const std::string index_path = JoinPath(dir, "model.safetensors.index.json");
  const std::string single_path = JoinPath(dir, "model.safetensors");
  if (FileExists(index_path)) {
    PHI4MM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    nlohmann::json idx;
    try {
      idx = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument("malformed JSON in '" + index_path + "': " + e.what());
    }
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      return InvalidArgument("'" + index_path + "' has no 'weight_map' object");
    std::set<std::string> shard_files;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return InvalidArgument("'" + index_path + "': weight_map entry '" + it.key() + "' is not a file name");
      const std::string file = it.value().get<std::string>();
      if (file.find('/') != std::string::npos || file == "..")
        return InvalidArgument("'" + index_path + "': shard name '" + file + "' must be a plain file name");
      shard_files.insert(file);
    }
    for (const std::string& file : shard_files) {
      const std::string p = JoinPath(dir, file);
      if (!FileExists(p))
        return NotFound("shard '" + file + "' listed in '" + index_path + "' is missing from '" + dir + "'");
      PHI4MM_RETURN_IF_ERROR(c.AddFile(p, ""));
    }
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      const std::string canonical =
          layout == CheckpointLayout::kOriginal ? CanonicalNameFromOriginal(it.key()) : it.key();
      if (!c.tensors_.count(canonical))
        return DataLoss("'" + index_path + "' lists tensor '" + it.key() + "' in '" +
                        it.value().get<std::string>() + "' but that shard does not contain it");
    }
  } else if (FileExists(single_path)) {
    PHI4MM_RETURN_IF_ERROR(c.AddFile(single_path, ""));
  } else {
    return NotFound("'" + dir + "' has neither model.safetensors nor model.safetensors.index.json");
  }
  if (layout == CheckpointLayout::kNative) {
    for (const char* adapter : {"vision", "speech"}) {
      const std::string p = JoinPath(JoinPath(dir, std::string(adapter) + "-lora"), "adapter_model.safetensors");
      if (FileExists(p)) PHI4MM_RETURN_IF_ERROR(c.AddFile(p, adapter));
    }
  }
  return c;
}

const TensorView* Checkpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::string Checkpoint::SourceName(const std::string& name) const {
  auto it = source_names_.find(name);
  return it == source_names_.end() ? name : it->second;
}

Result<TensorView> Checkpoint::Get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorView* t = Find(name);
  if (t == nullptr)
    return NotFound("checkpoint '" + dir_ + "' has no tensor '" + SourceName(name) +
                    "' (is the folder complete and a Phi-4-multimodal checkpoint?)");
  if (t->LogicalShape() != shape)
    return InvalidArgument("tensor '" + SourceName(name) + "' in '" + t->file + "' has shape " +
                           ShapeToString(t->LogicalShape()) + " but config.json implies " + ShapeToString(shape));
  return *t;
}

}  // namespace phi4mm
