// phi-4-mm-vision.onnx. Mirrors VisionModel::EncodeCrops and VisionEncodeJob::Finish
// (models/vision.cc) for each image of the batch in a Loop body:
//  * crops = 1 + (H/448)·(W/448) from image_sizes; only those are encoded (the rest is padding);
//  * Conv patch embedding; NaViT position ids looked up from a table indexed by the crop's
//    valid (rows, columns), which NavitPositionIds fills exactly as the engine does;
//  * encoder layers up to feature_layer: LayerNorm, attention with an additive -1e30 bias on
//    padded keys, tanh-GELU MLP;
//  * AvgPool 2x2; then one Gather over [pooled rows; sub_GN; glb_GN] with indices computed from
//    the useful HD area (uh, uw from the masks at [0::2, 0::2]) in sub_glb order;
//  * img_projection_up, exact (erf) GELU, img_projection_down.
#include "phi4mm/export/vision_model.h"

#include <cmath>
#include <limits>

#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/models/vision_position.h"
#include "phi4mm/onnx/onnx_writer.h"

namespace phi4mm::exporter {

namespace {

using onnx_writer::Attr;
using onnx_writer::Dim;
using onnx_writer::ElemType;
using onnx_writer::Graph;
using onnx_writer::ModelWriter;

constexpr int64_t kTensorInt64 = 7;

class VisionBuilder {
 public:
  VisionBuilder(const Checkpoint& ckpt, const ModelConfig& cfg, ModelWriter* w)
      : ckpt_(ckpt), cfg_(cfg), c_(cfg.vision), w_(w) {}
  Status Build();

 private:
  // Initializers (main graph; the Loop body reads them from the outer scope).
  Result<std::string> Floats(const std::string& name, std::vector<float> v, const std::vector<int64_t>& shape) {
    PHI4MM_RETURN_IF_ERROR(w_->AddReal(name, v.data(), shape));
    return name;
  }
  Result<std::string> Bias(const std::string& name, int64_t n) {
    PHI4MM_ASSIGN_OR_RETURN(std::vector<float> v, ReadFloats(ckpt_, name, 1, n, {n}));
    return Floats(name, std::move(v), {n});
  }
  // y = x·Wᵀ + b for the checkpoint linear `base` [out, in].
  Result<std::string> Linear(Graph& g, const std::string& x, const std::string& base, int64_t out, int64_t in) {
    PHI4MM_ASSIGN_OR_RETURN(std::vector<float> wt, ReadTransposed(ckpt_, base + ".weight", out, in));
    PHI4MM_ASSIGN_OR_RETURN(std::string w, Floats(base + ".weight_T", std::move(wt), {in, out}));
    PHI4MM_ASSIGN_OR_RETURN(std::string b, Bias(base + ".bias", out));
    return g.Op("Add", {g.Op("MatMul", {x, w}), b});
  }
  Result<std::string> LayerNorm(Graph& g, const std::string& x, const std::string& base, int64_t d) {
    PHI4MM_ASSIGN_OR_RETURN(std::string w, Bias(base + ".weight", d));
    PHI4MM_ASSIGN_OR_RETURN(std::string b, Bias(base + ".bias", d));
    return g.Op("LayerNormalization", {x, w, b},
                {Attr::Int("axis", -1), Attr::Float("epsilon", static_cast<float>(c_.layer_norm_eps))});
  }
  Result<std::string> EncoderLayer(Graph& g, const std::string& h, const std::string& bias, int64_t layer);
  Result<std::string> ImageBody(Graph& g, const std::string& index);

  const Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  const VisionConfig& c_;
  ModelWriter* w_;
};

Result<std::string> VisionBuilder::EncoderLayer(Graph& g, const std::string& h, const std::string& bias,
                                                int64_t layer) {
  const int64_t D = c_.hidden_size, I = c_.intermediate_size, nh = c_.num_attention_heads, hd = D / nh;
  const std::string p = std::string(names::kVisionPrefix) + "img_processor.encoder.layers." + std::to_string(layer) + ".";
  PHI4MM_ASSIGN_OR_RETURN(std::string x, LayerNorm(g, h, p + "layer_norm1", D));
  const std::string heads = g.ConstInts({0, 0, nh, hd});
  auto proj = [&](const char* name, std::vector<int64_t> perm) -> Result<std::string> {
    PHI4MM_ASSIGN_OR_RETURN(std::string y, Linear(g, x, p + "self_attn." + name, D, D));
    return g.Op("Transpose", {g.Op("Reshape", {y, heads})}, {Attr::Ints("perm", std::move(perm))});
  };
  PHI4MM_ASSIGN_OR_RETURN(std::string q, proj("q_proj", {0, 2, 1, 3}));  // [n, nh, N, hd]
  PHI4MM_ASSIGN_OR_RETURN(std::string k, proj("k_proj", {0, 2, 3, 1}));  // [n, nh, hd, N]
  PHI4MM_ASSIGN_OR_RETURN(std::string v, proj("v_proj", {0, 2, 1, 3}));
  const std::string scale = g.ConstReal({static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))}, {});
  const std::string scores = g.Op("Add", {g.Op("Mul", {g.Op("MatMul", {q, k}), scale}), bias});
  const std::string att = g.Op("MatMul", {g.Op("Softmax", {scores}, {Attr::Int("axis", -1)}), v});
  const std::string merged =
      g.Op("Reshape", {g.Op("Transpose", {att}, {Attr::Ints("perm", {0, 2, 1, 3})}), g.ConstInts({0, 0, D})});
  PHI4MM_ASSIGN_OR_RETURN(std::string o, Linear(g, merged, p + "self_attn.out_proj", D, D));
  const std::string h1 = g.Op("Add", {h, o});
  PHI4MM_ASSIGN_OR_RETURN(std::string x2, LayerNorm(g, h1, p + "layer_norm2", D));
  PHI4MM_ASSIGN_OR_RETURN(std::string f1, Linear(g, x2, p + "mlp.fc1", I, D));
  // gelu_pytorch_tanh: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  const std::string cube = g.Op("Mul", {g.Op("Mul", {f1, f1}), f1});
  const std::string inner = g.Op("Mul", {g.Op("Add", {f1, g.Op("Mul", {cube, g.ConstReal({0.044715f}, {})})}),
                                         g.ConstReal({0.7978845608028654f}, {})});
  const std::string gelu = g.Op("Mul", {g.Op("Mul", {f1, g.ConstReal({0.5f}, {})}),
                                        g.Op("Add", {g.Op("Tanh", {inner}), g.ConstReal({1.0f}, {})})});
  PHI4MM_ASSIGN_OR_RETURN(std::string f2, Linear(g, gelu, p + "mlp.fc2", D, I));
  return g.Op("Add", {h1, f2});
}

// One image (index `i` into the batch) -> its features [num_tokens, T].
Result<std::string> VisionBuilder::ImageBody(Graph& g, const std::string& i) {
  const int64_t D = c_.hidden_size, T = cfg_.text.hidden_size, ps = c_.patch_size, S = c_.image_size;
  const int64_t P = S / ps, N = P * P, F = P / 2;
  const std::string e = names::kVisionPrefix, pre = e + std::string("img_processor.");
  const std::string axis0 = g.ConstInts({0}), one = g.ConstInts({1}, true);
  const std::string sizes = g.Op("Gather", {"image_sizes", i}, {Attr::Int("axis", 0)});  // [2]
  const std::string crop_px = g.ConstInts({S}, true);
  const std::string gh = g.Op("Div", {g.Op("Gather", {sizes, g.ConstInts({0}, true)}, {Attr::Int("axis", 0)}), crop_px});
  const std::string gw = g.Op("Div", {g.Op("Gather", {sizes, one}, {Attr::Int("axis", 0)}), crop_px});
  const std::string crops = g.Op("Add", {g.Op("Mul", {gh, gw}), one});
  const std::string crops1 = g.Op("Unsqueeze", {crops, axis0});
  const std::string pixels = g.Op("Slice", {g.Op("Gather", {"pixel_values", i}, {Attr::Int("axis", 0)}), axis0, crops1, axis0});
  const std::string mask = g.Op("Slice", {g.Op("Gather", {"image_attention_mask", i}, {Attr::Int("axis", 0)}), axis0, crops1, axis0});
  // Patch embedding [n, D, P, P] -> [n, N, D].
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> pw, ReadFloats(ckpt_, pre + "embeddings.patch_embedding.weight", D, 3 * ps * ps, {D, 3, ps, ps}));
  PHI4MM_ASSIGN_OR_RETURN(std::string pwn, Floats(pre + "embeddings.patch_embedding.weight", std::move(pw), {D, 3, ps, ps}));
  PHI4MM_ASSIGN_OR_RETURN(std::string pb, Bias(pre + "embeddings.patch_embedding.bias", D));
  const std::string conv = g.Op("Conv", {pixels, pwn, pb}, {Attr::Ints("kernel_shape", {ps, ps}), Attr::Ints("strides", {ps, ps})});
  const std::string patches =
      g.Op("Transpose", {g.Op("Reshape", {conv, g.ConstInts({0, D, N})})}, {Attr::Ints("perm", {0, 2, 1})});
  // Positions: valid rows = Σ mask[:, r, 0], columns = Σ mask[:, 0, c]; table row rows·(P+1) + cols.
  auto count = [&](std::vector<int64_t> starts, std::vector<int64_t> ends) {
    const std::string sl = g.Op("Slice", {mask, g.ConstInts(starts), g.ConstInts(ends), g.ConstInts({1, 2})});
    const std::string s = g.Op("ReduceSum", {sl, g.ConstInts({1, 2})}, {Attr::Int("keepdims", 0)});
    return g.Op("Cast", {s}, {Attr::Int("to", kTensorInt64)});
  };
  const std::string vr = count({0, 0}, {P, 1}), vc = count({0, 0}, {1, P});  // [n]
  const std::string lut_row = g.Op("Add", {g.Op("Mul", {vr, g.ConstInts({P + 1}, true)}), vc});
  const std::string pos_ids = g.Op("Gather", {"navit_position_ids", lut_row}, {Attr::Int("axis", 0)});  // [n, N]
  const std::string pos = g.Op("Gather", {pre + "embeddings.position_embedding.weight", pos_ids}, {Attr::Int("axis", 0)});
  std::string h = g.Op("Add", {patches, pos});
  // Additive key bias [n, 1, 1, N]: 0 on valid patches, -1e30 on padded ones.
  const std::string flat = g.Op("Reshape", {mask, g.ConstInts({0, N})});
  const std::string bias = g.Op("Unsqueeze", {g.Op("Mul", {g.Op("Sub", {flat, g.ConstReal({1.0f}, {})}),
                                                            g.ConstReal({1e30f}, {})}),
                                              g.ConstInts({1, 2})});
  const int64_t n_states = c_.num_hidden_layers + 1;
  const int64_t run = c_.feature_layer < 0 ? n_states + c_.feature_layer : c_.feature_layer;
  for (int64_t l = 0; l < run; ++l) {
    PHI4MM_ASSIGN_OR_RETURN(h, EncoderLayer(g, h, bias, l));
  }
  // AvgPool 2x2 -> pooled rows [(crop·F + r)·F + c, D].
  const std::string grid = g.Op("Transpose", {g.Op("Reshape", {h, g.ConstInts({0, P, P, D})})},
                                {Attr::Ints("perm", {0, 3, 1, 2})});
  const std::string pooled_grid =
      g.Op("AveragePool", {grid}, {Attr::Ints("kernel_shape", {2, 2}), Attr::Ints("strides", {2, 2})});
  const std::string pooled = g.Op("Reshape", {g.Op("Transpose", {pooled_grid}, {Attr::Ints("perm", {0, 2, 3, 1})}),
                                              g.ConstInts({-1, D})});
  const std::string table = g.Op("Concat", {pooled, "sub_gn_row", "glb_gn_row"}, {Attr::Int("axis", 0)});
  const std::string n_pooled = g.Op("Gather", {g.Op("Shape", {pooled}), g.ConstInts({0}, true)}, {Attr::Int("axis", 0)});
  const std::string sub_idx = n_pooled, glb_idx = g.Op("Add", {n_pooled, one});
  // Useful HD area: uh = Σ over HD crops of column 0 of mask[crop][0::2, 0], uw likewise over row 0.
  const std::string hd_masks = g.Op("Reshape", {g.Op("Slice", {mask, g.ConstInts({1}), crops1, axis0}),
                                                g.Op("Concat", {g.Op("Unsqueeze", {gh, axis0}), g.Op("Unsqueeze", {gw, axis0}),
                                                                g.ConstInts({P, P})},
                                                     {Attr::Int("axis", 0)})});  // [gh, gw, P, P]
  auto useful = [&](std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> steps) {
    const std::string sl = g.Op("Slice", {hd_masks, g.ConstInts(starts), g.ConstInts(ends), g.ConstInts({0, 1, 2, 3}),
                                          g.ConstInts(steps)});
    return g.Op("Cast", {g.Op("ReduceSum", {sl}, {Attr::Int("keepdims", 0)})}, {Attr::Int("to", kTensorInt64)});
  };
  const int64_t big = std::numeric_limits<int32_t>::max();
  const std::string uh = useful({0, 0, 0, 0}, {big, 1, P, 1}, {1, 1, 2, 1});
  const std::string uw = useful({0, 0, 0, 0}, {1, big, 1, P}, {1, 1, 1, 2});
  const std::string Fc = g.ConstInts({F}, true);
  auto grid_idx = [&](const std::string& rows, const std::string& cols_plus1, bool hd) {
    const std::string r = g.Op("Unsqueeze", {g.Op("Range", {g.ConstInts({0}, true), rows, one}), g.ConstInts({1})});
    const std::string c = g.Op("Unsqueeze", {g.Op("Range", {g.ConstInts({0}, true), cols_plus1, one}), axis0});
    std::string crop = g.ConstInts({0}, true);
    if (hd) crop = g.Op("Add", {g.Op("Add", {g.Op("Mul", {g.Op("Div", {r, Fc}), gw}), g.Op("Div", {c, Fc})}), one});
    const std::string idx = g.Op("Add", {g.Op("Mul", {g.Op("Add", {g.Op("Mul", {crop, Fc}), g.Op("Mod", {r, Fc})}), Fc}),
                                         g.Op("Mod", {c, Fc})});
    const std::string last = g.Op("Sub", {cols_plus1, one});
    const std::string sel = g.Op("Where", {g.Op("Equal", {c, last}), sub_idx, idx});
    return g.Op("Reshape", {sel, g.ConstInts({-1})});
  };
  const std::string hd_idx = grid_idx(uh, g.Op("Add", {uw, one}), true);
  const std::string glb_idx_rows = grid_idx(Fc, g.ConstInts({F + 1}, true), false);
  const std::string all = g.Op("Concat", {hd_idx, g.Op("Unsqueeze", {glb_idx, axis0}), glb_idx_rows}, {Attr::Int("axis", 0)});
  const std::string seq = g.Op("Gather", {table, all}, {Attr::Int("axis", 0)});  // [n_tok, D]
  PHI4MM_ASSIGN_OR_RETURN(std::string up, Linear(g, seq, e + "img_projection_up", T, D));
  const std::string gelu = g.Op("Mul", {g.Op("Mul", {up, g.ConstReal({0.5f}, {})}),
                                        g.Op("Add", {g.Op("Erf", {g.Op("Mul", {up, g.ConstReal({0.70710678118654752f}, {})})}),
                                                     g.ConstReal({1.0f}, {})})});
  return Linear(g, gelu, e + "img_projection_down", T, T);
}

Status VisionBuilder::Build() {
  const int64_t D = c_.hidden_size, T = cfg_.text.hidden_size, S = c_.image_size, ps = c_.patch_size;
  const int64_t P = S / ps;
  Graph& g = w_->graph();
  g.Input("pixel_values", w_->real_type(), {Dim("num_images"), Dim("max_num_crops"), int64_t{3}, S, S});
  g.Input("image_attention_mask", w_->real_type(), {Dim("num_images"), Dim("max_num_crops"), P, P});
  g.Input("image_sizes", ElemType::kInt64, {Dim("num_images"), int64_t{2}});
  g.Output(kImageFeatures, w_->real_type(), {Dim("num_image_tokens"), T});
  // Tables read from the Loop body.
  std::vector<int64_t> lut(static_cast<size_t>((P + 1) * (P + 1) * P * P));
  for (int64_t r = 0; r <= P; ++r)
    for (int64_t c = 0; c <= P; ++c) {
      const std::vector<int64_t> ids = NavitPositionIds(r, c, P);
      std::copy(ids.begin(), ids.end(), lut.begin() + (r * (P + 1) + c) * P * P);
    }
  PHI4MM_RETURN_IF_ERROR(w_->AddBytes("navit_position_ids", ElemType::kInt64, lut.data(), lut.size() * sizeof(int64_t),
                                      {(P + 1) * (P + 1), P * P}));
  const std::string pre = std::string(names::kVisionPrefix) + "img_processor.";
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> pos, ReadFloats(ckpt_, pre + "embeddings.position_embedding.weight", P * P, D));
  PHI4MM_RETURN_IF_ERROR(w_->AddReal(pre + "embeddings.position_embedding.weight", pos.data(), {P * P, D}));
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> sub, ReadFloats(ckpt_, std::string(names::kVisionPrefix) + "sub_img_feature_extensor", 1, D, {1, 1, 1, D}));
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> glb, ReadFloats(ckpt_, std::string(names::kVisionPrefix) + "global_img_feature_extensor", 1, D, {1, 1, D}));
  PHI4MM_RETURN_IF_ERROR(w_->AddReal("sub_gn_row", sub.data(), {1, D}));
  PHI4MM_RETURN_IF_ERROR(w_->AddReal("glb_gn_row", glb.data(), {1, D}));

  return AddConcatLoop(w_, "image", "pixel_values", T, kImageFeatures,
                       [&](Graph& body, const std::string& index) { return ImageBody(body, index); });
}

}  // namespace

Result<uint64_t> WriteVisionModel(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& out_dir,
                                  const ExportOptions& opts) {
  PHI4MM_RETURN_IF_ERROR(opts.Validate());
  const VisionConfig& c = cfg.vision;
  if (c.patch_size <= 0 || c.image_size % c.patch_size != 0 || (c.image_size / c.patch_size) % 2 != 0 ||
      c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0)
    return Unsupported("the vision tower's image_size " + std::to_string(c.image_size) + " / patch_size " +
                       std::to_string(c.patch_size) + " / heads " + std::to_string(c.num_attention_heads) +
                       " cannot be exported (an even number of patches per side is needed)");
  PHI4MM_ASSIGN_OR_RETURN(std::unique_ptr<ModelWriter> w,
                          ModelWriter::Create(out_dir, kVisionFile, "phi-4-mm-vision", opts.RealType()));
  VisionBuilder b(ckpt, cfg, w.get());
  PHI4MM_RETURN_IF_ERROR(b.Build());
  PHI4MM_RETURN_IF_ERROR(w->Save());
  return w->external_bytes();
}

}  // namespace phi4mm::exporter
