// Export options, contract names and float32 tensor reads for the exporter.
#include "phi4mm/export/export_common.h"

#include "phi4mm/base/file_map.h"
#include "phi4mm/models/weight_loading.h"

namespace phi4mm::exporter {

namespace {

// The exporter reads each checkpoint tensor once (the tied table twice) and writes a converted
// copy: the tensor's mapped pages can leave the resident set (a full-size export then peaks at
// its largest converted tensor, not at the 11 GB checkpoint).
void ReleaseSource(const Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape) {
  auto t = ckpt.Get(name, shape);
  if (t.ok() && !t->packed) AdviseUnneeded(t->data, t->nbytes);
}

}  // namespace

Status ExportOptions::Validate() const {
  if (precision != "fp32" && precision != "fp16" && precision != "int4")
    return InvalidArgument("--precision must be fp32, fp16 or int4, got '" + precision + "'");
  if (target != "cpu" && target != "cuda") return InvalidArgument("--target must be cpu or cuda, got '" + target + "'");
  if (lora != "sum" && lora != "if" && lora != "none")
    return InvalidArgument("--lora must be sum, if or none, got '" + lora + "'");
  return Status::Ok();
}

Status RunnableByOrt(const ModelConfig& cfg) {
  const int64_t hd = cfg.text.head_dim;
  if (hd % 16 == 0) return Status::Ok();
  return Unsupported("the decoder's head size is " + std::to_string(hd) +
                     ", and ONNX Runtime's GroupQueryAttention runs only head sizes that are multiples of 16 "
                     "(onnxruntime 1.32 fails at the first step with 'head_size shall be a multiple of 16'), so the "
                     "package could not run; Phi-4-multimodal's head size is 128. --allow-unrunnable writes it anyway "
                     "(for the ONNX checkers only)");
}

onnx_writer::ElemType ExportOptions::RealType() const {
  const bool half = precision == "fp16" || (precision == "int4" && target == "cuda");
  return half ? onnx_writer::ElemType::kFloat16 : onnx_writer::ElemType::kFloat;
}

std::string PastKeyName(int64_t l) { return "past_key_values." + std::to_string(l) + ".key"; }
std::string PastValueName(int64_t l) { return "past_key_values." + std::to_string(l) + ".value"; }
std::string PresentKeyName(int64_t l) { return "present." + std::to_string(l) + ".key"; }
std::string PresentValueName(int64_t l) { return "present." + std::to_string(l) + ".value"; }

Result<std::vector<float>> ReadFloats(const Checkpoint& ckpt, const std::string& name, int64_t rows, int64_t cols,
                                      const std::vector<int64_t>& shape) {
  PHI4MM_ASSIGN_OR_RETURN(WeightMatrix m,
                          LoadWeight(ckpt, name, shape.empty() ? std::vector<int64_t>{rows, cols} : shape, rows, cols));
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) m.Row(r, out.data() + r * cols);
  ReleaseSource(ckpt, name, shape.empty() ? std::vector<int64_t>{rows, cols} : shape);
  return out;
}

Result<std::vector<float>> ReadTransposed(const Checkpoint& ckpt, const std::string& name, int64_t rows, int64_t cols,
                                          float scale, const std::vector<int64_t>& shape) {
  PHI4MM_ASSIGN_OR_RETURN(WeightMatrix m,
                          LoadWeight(ckpt, name, shape.empty() ? std::vector<int64_t>{rows, cols} : shape, rows, cols));
  std::vector<float> row(static_cast<size_t>(cols)), out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    m.Row(r, row.data());
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = row[static_cast<size_t>(c)] * scale;
  }
  ReleaseSource(ckpt, name, shape.empty() ? std::vector<int64_t>{rows, cols} : shape);
  return out;
}

Status AddConcatLoop(onnx_writer::ModelWriter* w, const std::string& name, const std::string& count_of, int64_t hidden,
                     const std::string& output,
                     const std::function<Result<std::string>(onnx_writer::Graph& body, const std::string& index)>& item) {
  using onnx_writer::Attr;
  using onnx_writer::Dim;
  using onnx_writer::ElemType;
  onnx_writer::Graph& g = w->graph();
  auto [body_proto, body] = w->Subgraph(name);
  const std::string iter = w->Fresh(name + "_index"), cond_in = w->Fresh("cond_in"), acc_in = w->Fresh("features_in");
  body.Input(iter, ElemType::kInt64, {});
  body.Input(cond_in, ElemType::kBool, {});
  body.Input(acc_in, w->real_type(), {Dim("tokens_so_far"), hidden});
  PHI4MM_ASSIGN_OR_RETURN(std::string feats, item(body, iter));
  body.Output(body.Op("Identity", {cond_in}), ElemType::kBool, {});
  body.Output(body.Op("Concat", {acc_in, feats}, {Attr::Int("axis", 0)}), w->real_type(), {Dim("tokens_after"), hidden});
  const std::string n = g.Op("Gather", {g.Op("Shape", {count_of}), g.ConstInts({0}, true)}, {Attr::Int("axis", 0)});
  const std::string empty = g.Op("Reshape", {g.ConstReal({}, {0}), g.ConstInts({0, hidden})});
  g.Node("Loop", {n, "", empty}, 1, {Attr::Graph("body", body_proto)}, "", {output});
  return Status::Ok();
}

}  // namespace phi4mm::exporter
