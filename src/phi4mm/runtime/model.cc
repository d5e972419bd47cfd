// Model loading: the kernel ISA override check, config, tokenizer, checkpoint, then the parts, each
// shape-checked.
#include "phi4mm/runtime/model.h"

#include "phi4mm/kernels/isa.h"
#include "phi4mm/models/tensor_manifest.h"

namespace phi4mm {

Result<std::shared_ptr<const Model>> Model::Load(const std::string& dir, const LoadOptions& opts) {
  // A refused PHI4MM_ISA override is the caller's to see, not a silent fallback.
  PHI4MM_RETURN_IF_ERROR(IsaOverrideStatus());
  std::shared_ptr<Model> m(new Model());
  PHI4MM_ASSIGN_OR_RETURN(m->config_, ModelConfig::LoadFromDir(dir));
  PHI4MM_ASSIGN_OR_RETURN(m->tokenizer_, Tokenizer::LoadFromDir(dir));
  PHI4MM_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(dir, m->config_.layout));
  m->checkpoint_ = std::make_unique<Checkpoint>(std::move(ckpt));
  m->checkpoint_->set_conversion_log(opts.conversion_log);
  m->checkpoint_->set_load_mode(QuantModeName(opts.quant));
  m->pool_ = std::make_unique<ThreadPool>(opts.num_threads);
  m->quant_ = opts.quant;
  PHI4MM_ASSIGN_OR_RETURN(TokenEmbedding emb,
                          TokenEmbedding::Load(*m->checkpoint_, m->config_.text, opts.quant, m->pool_.get()));
  m->embedding_ = std::make_shared<const TokenEmbedding>(std::move(emb));
  const bool exact = opts.quant == QuantMode::kNone && m->checkpoint_->prequantized().empty();
  const KvDType kv = opts.kv_dtype.value_or(exact ? KvDType::kF32 : KvDType::kF16);
  PHI4MM_ASSIGN_OR_RETURN(m->decoder_, Decoder::Load(*m->checkpoint_, m->config_, m->embedding_, opts.quant,
                                                     m->pool_.get(), kv));
  return std::shared_ptr<const Model>(std::move(m));
}

// The part in `slot`, loaded on first use (under parts_mu_).
template <class Part>
Result<const Part*> LoadPart(std::shared_ptr<const Part>& slot, const Checkpoint& ckpt, const ModelConfig& config,
                             QuantMode quant, ThreadPool* pool, const char* what) {
  if (!slot) {
    auto p = Part::Load(ckpt, config, quant, pool);
    if (!p.ok()) return p.status().WithContext(std::string("loading the ") + what + " part of '" + ckpt.dir() + "'");
    slot = std::move(p).value();
  }
  return slot.get();
}

Result<const VisionModel*> Model::vision() const {
  std::lock_guard<std::mutex> lock(parts_mu_);
  return LoadPart(vision_, *checkpoint_, config_, quant_, pool_.get(), "vision");
}

Result<grammar::Compiler*> Model::grammar() const {
  std::lock_guard<std::mutex> lock(parts_mu_);
  if (!grammar_) {
    auto c = grammar::Compiler::Create(grammar::VocabularyOf(*tokenizer_, decoder_->lm_head().rows()));
    if (!c.ok()) return c.status();
    grammar_ = std::move(c).value();
  }
  return grammar_.get();
}

Result<const SpeechModel*> Model::speech() const {
  std::lock_guard<std::mutex> lock(parts_mu_);
  return LoadPart(speech_, *checkpoint_, config_, quant_, pool_.get(), "speech");
}

ModelInfo Model::Info() const {
  ModelInfo info;
  info.layout = LayoutName(config_.layout);
  info.dir = checkpoint_->dir();
  info.num_files = checkpoint_->num_files();
  const TensorManifest manifest = TensorManifest::ForConfig(config_);
  for (const auto& [name, t] : checkpoint_->tensors()) {
    const int64_t n = t.packed ? t.packed->rows * t.packed->cols : t.numel();
    info.params_by_dtype[t.packed ? t.packed->format : DTypeName(t.dtype)] += n;
    const TensorSpec* spec = manifest.Find(name);
    if (spec == nullptr) info.params_other += n;
    else if (spec->role == TensorRole::kLoraA || spec->role == TensorRole::kLoraB)
      (spec->adapter == LoraMode::kVision ? info.params_vision_lora : info.params_speech_lora) += n;
    else if (spec->part == ModelPart::kEmbedding) info.params_embedding += n;
    else if (spec->part == ModelPart::kVision) info.params_vision += n;
    else if (spec->part == ModelPart::kSpeech) info.params_speech += n;
    else info.params_decoder += n;
  }
  const TextConfig& t = config_.text;
  info.context_length = t.max_position_embeddings;
  info.kv_dtype = KvDTypeName(decoder_->kv_dtype());
  info.kv_bytes_per_token = decoder_->kv_bytes_per_token();
  return info;
}

}  // namespace phi4mm
