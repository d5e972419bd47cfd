// phi-4-mm-embedding.onnx: Gather over the token table (in the package's real type), then one ScatterND per modality
// at the positions NonZero(Equal(input_ids, placeholder)) lists in row-major order, which is the
// k-th-occurrence order EmbedWithMedia uses.
#include "phi4mm/export/embedding_model.h"

#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/onnx/onnx_writer.h"
#include "phi4mm/tokenizer/chat_format.h"

namespace phi4mm::exporter {

Result<uint64_t> WriteEmbeddingModel(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& out_dir,
                                     const ExportOptions& opts) {
  using onnx_writer::Attr;
  using onnx_writer::Dim;
  using onnx_writer::ElemType;
  PHI4MM_RETURN_IF_ERROR(opts.Validate());
  const TextConfig& c = cfg.text;
  const int64_t H = c.hidden_size;
  PHI4MM_ASSIGN_OR_RETURN(std::unique_ptr<onnx_writer::ModelWriter> w,
                          onnx_writer::ModelWriter::Create(out_dir, kEmbeddingFile, "phi-4-mm-embedding",
                                                           opts.RealType()));
  onnx_writer::Graph& g = w->graph();
  g.Input(kInputIds, ElemType::kInt64, {Dim("batch_size"), Dim("sequence_length")});
  g.Input(kImageFeatures, w->real_type(), {Dim("num_image_tokens"), H});
  g.Input(kAudioFeatures, w->real_type(), {Dim("num_audio_tokens"), H});
  g.Output(kInputsEmbeds, w->real_type(), {Dim("batch_size"), Dim("sequence_length"), H});
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> table, ReadFloats(ckpt, names::kEmbedTokens, c.vocab_size, H));
  PHI4MM_RETURN_IF_ERROR(w->AddReal(names::kEmbedTokens, table.data(), {c.vocab_size, H}));
  table = {};
  std::string x = g.Op("Gather", {names::kEmbedTokens, kInputIds}, {Attr::Int("axis", 0)});
  const std::pair<int64_t, const char*> kSplices[] = {{kImageTokenId, kImageFeatures}, {kAudioTokenId, kAudioFeatures}};
  for (const auto& [id, features] : kSplices) {
    const std::string where = g.Op("NonZero", {g.Op("Equal", {kInputIds, g.ConstInts({id}, true)})});  // [2, N]
    const std::string idx = g.Op("Transpose", {where}, {Attr::Ints("perm", {1, 0})});                   // [N, 2]
    x = g.Op("ScatterND", {x, idx, features});
  }
  g.Node("Identity", {x}, 1, {}, "", {kInputsEmbeds});
  PHI4MM_RETURN_IF_ERROR(w->Save());
  return w->external_bytes();
}

}  // namespace phi4mm::exporter
