// The `vision` part (reference: transformers 4.57.1 Phi4MultimodalImageEmbedding with
// Phi4MultimodalVisionModel, eager attention; Microsoft's Phi4MMImageEmbedding + SigLIP-NaViT):
// patch embedding, bucketed NaViT positions, the encoder up to hidden_states[feature_layer], the
// 2x2 average pool, the sub_glb HD layout with its separators, and the projection MLP.
// Shapes below use B = crops of the image, P = patches per side (32), D = vision hidden (1152),
// T = text hidden (3072), F = (P+1)/2 pooled tokens per side (16).
#include "phi4mm/models/vision.h"

#include <cmath>
#include <cstring>

#include "phi4mm/kernels/vision_ops.h"
#include "phi4mm/models/vision_position.h"
#include "phi4mm/models/tensor_manifest.h"
#include "phi4mm/models/weight_loading.h"

namespace phi4mm {

namespace {

const char* const kPrefix = names::kVisionPrefix;

void Tap(TensorTap* tap, const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
  if (tap) tap->Tap(name, v.data(), shape);
}

}  // namespace

std::optional<WeightFormat> VisionModel::EncoderLinearFormat(QuantMode quant) {
  return FormatFor(TensorRole::kEncoderLinear, quant);
}

WeightFormat VisionModel::linear_format() const {
  return layers_.empty() ? patch_.w.format() : layers_.front().fc1.w.format();
}

Result<std::shared_ptr<const VisionModel>> VisionModel::Load(const Checkpoint& ckpt, const ModelConfig& mc,
                                                             QuantMode quant, ThreadPool* pool) {
  const VisionConfig& c = mc.vision;
  const int64_t D = c.hidden_size, I = c.intermediate_size, T = mc.text.hidden_size;
  if (c.patch_size <= 0 || c.image_size % c.patch_size != 0)
    return InvalidArgument("vision image_size " + std::to_string(c.image_size) + " is not a multiple of patch_size " +
                           std::to_string(c.patch_size) + "; check the vision config in config.json");
  if (c.num_attention_heads <= 0 || D % c.num_attention_heads != 0)
    return InvalidArgument("vision hidden_size " + std::to_string(D) + " is not divisible by num_attention_heads " +
                           std::to_string(c.num_attention_heads));
  if (c.crop_size != c.image_size)
    return Unsupported("vision crop_size " + std::to_string(c.crop_size) + " differs from image_size " +
                       std::to_string(c.image_size) + "; phi4mm needs one crop per encoder input");
  // hidden_states = [embeddings, layer 0, ..., layer n-2, post_layernorm(layer n-1)] (HF's
  // check_model_inputs); index feature_layer (negative from the end) must name a raw layer output.
  const int64_t n_states = c.num_hidden_layers + 1;
  const int64_t index = c.feature_layer < 0 ? n_states + c.feature_layer : c.feature_layer;
  if (index < 0 || index >= n_states - 1)
    return Unsupported("vision feature_layer " + std::to_string(c.feature_layer) + " with " +
                       std::to_string(c.num_hidden_layers) +
                       " layers: phi4mm supports hidden states 0..num_hidden_layers-1 (the checkpoint uses -2)");

  std::shared_ptr<VisionModel> m(new VisionModel());
  m->cfg_ = c;
  m->text_hidden_ = T;
  m->patches_per_side_ = c.image_size / c.patch_size;
  m->layers_to_run_ = index;
  const int64_t P = m->patches_per_side_, ps = c.patch_size;
  const std::string p = std::string(kPrefix) + "img_processor.";
  PHI4MM_ASSIGN_OR_RETURN(m->patch_.w, LoadWeight(ckpt, p + "embeddings.patch_embedding.weight", {D, 3, ps, ps}, D,
                                                  3 * ps * ps));
  PHI4MM_ASSIGN_OR_RETURN(m->patch_.b, LoadFloats(ckpt, p + "embeddings.patch_embedding.bias", {D}));
  PHI4MM_ASSIGN_OR_RETURN(m->position_,
                          LoadWeight(ckpt, p + "embeddings.position_embedding.weight", {P * P, D}, P * P, D));
  auto linear = [&](const std::string& name, int64_t out, int64_t in, Linear* l,
                    std::optional<WeightFormat> format = std::nullopt) -> Status {
    PHI4MM_ASSIGN_OR_RETURN(l->w, LoadWeight(ckpt, name + ".weight", {out, in}, out, in, format, pool));
    PHI4MM_ASSIGN_OR_RETURN(l->b, LoadFloats(ckpt, name + ".bias", {out}));
    return Status::Ok();
  };
  const std::optional<WeightFormat> format = EncoderLinearFormat(quant);
  for (int64_t i = 0; i < m->layers_to_run_; ++i) {
    const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
    Layer L;
    PHI4MM_ASSIGN_OR_RETURN(L.ln1_w, LoadFloats(ckpt, l + "layer_norm1.weight", {D}));
    PHI4MM_ASSIGN_OR_RETURN(L.ln1_b, LoadFloats(ckpt, l + "layer_norm1.bias", {D}));
    PHI4MM_ASSIGN_OR_RETURN(L.ln2_w, LoadFloats(ckpt, l + "layer_norm2.weight", {D}));
    PHI4MM_ASSIGN_OR_RETURN(L.ln2_b, LoadFloats(ckpt, l + "layer_norm2.bias", {D}));
    PHI4MM_RETURN_IF_ERROR(linear(l + "self_attn.q_proj", D, D, &L.q, format));
    PHI4MM_RETURN_IF_ERROR(linear(l + "self_attn.k_proj", D, D, &L.k, format));
    PHI4MM_RETURN_IF_ERROR(linear(l + "self_attn.v_proj", D, D, &L.v, format));
    PHI4MM_RETURN_IF_ERROR(linear(l + "self_attn.out_proj", D, D, &L.out, format));
    PHI4MM_RETURN_IF_ERROR(linear(l + "mlp.fc1", I, D, &L.fc1, format));
    PHI4MM_RETURN_IF_ERROR(linear(l + "mlp.fc2", D, I, &L.fc2, format));
    m->layers_.push_back(std::move(L));
  }
  const std::string e = kPrefix;
  PHI4MM_ASSIGN_OR_RETURN(m->glb_gn_, LoadFloats(ckpt, e + "global_img_feature_extensor", {1, 1, D}));
  PHI4MM_ASSIGN_OR_RETURN(m->sub_gn_, LoadFloats(ckpt, e + "sub_img_feature_extensor", {1, 1, 1, D}));
  PHI4MM_RETURN_IF_ERROR(linear(e + "img_projection_up", T, D, &m->proj_up_));
  PHI4MM_RETURN_IF_ERROR(linear(e + "img_projection_down", T, T, &m->proj_down_));
  return std::shared_ptr<const VisionModel>(std::move(m));
}

void VisionModel::Apply(const Linear& l, const float* x, int64_t n, float* y, ThreadPool* pool) const {
  l.w.MatMul(x, n, y, pool);
  AddBiasParallel(y, l.b.data(), n, l.w.rows(), pool);
}

// Phi4MultimodalVisionModel.forward (embeddings + encoder layers) for B crops.
Result<std::vector<float>> VisionModel::EncodeCrops(const float* pixels, const uint8_t* mask, int64_t B,
                                                    ThreadPool* pool, TensorTap* tap,
                                                    const std::string& tap_prefix) const {
  PHI4MM_ASSIGN_OR_RETURN(VisionCropBatch cb, EmbedCrops(pixels, mask, B, pool, tap, tap_prefix));
  RunLayers(cb, static_cast<int64_t>(layers_.size()), pool, tap, tap_prefix);
  return std::move(cb.h);
}

Result<VisionCropBatch> VisionModel::EmbedCrops(const float* pixels, const uint8_t* mask, int64_t B,
                                                ThreadPool* pool, TensorTap* tap,
                                                const std::string& tap_prefix) const {
  const int64_t P = patches_per_side_, ps = cfg_.patch_size, S = cfg_.image_size, D = cfg_.hidden_size;
  const int64_t N = P * P, K = 3 * ps * ps, rows = B * N;
  // Phi4MultimodalVisionEmbeddings: Conv2d(3->D, k=ps, stride=ps) as im2col [B*N, 3*ps*ps] x W^T,
  // patches row-major (index = row*P + col), kernel order (channel, ky, kx).
  std::vector<float> cols(static_cast<size_t>(rows * K));
  pool->ParallelFor(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / N, pr = (r % N) / P, pc = r % P;
      float* dst = cols.data() + r * K;
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t ky = 0; ky < ps; ++ky)
          std::memcpy(dst + (ch * ps + ky) * ps, pixels + ((b * 3 + ch) * S + pr * ps + ky) * S + pc * ps,
                      sizeof(float) * ps);
    }
  }, 64);
  std::vector<float> h(static_cast<size_t>(rows * D));
  Apply(patch_, cols.data(), rows, h.data(), pool);
  cols = {};
  // Positions: bucketed NaViT ids under each crop's valid rectangle; masked patches keep id 0.
  std::vector<uint8_t> key_valid(static_cast<size_t>(rows));
  bool any_masked = false;
  std::vector<float> pos(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    const uint8_t* m = mask + b * N;
    int64_t vr = 0, vc = 0;
    for (int64_t i = 0; i < P; ++i) {
      vr += m[i * P] != 0;
      vc += m[i] != 0;
    }
    for (int64_t i = 0; i < N; ++i) {
      const bool inside = (i / P) < vr && (i % P) < vc;
      if ((m[i] != 0) != inside)
        return InvalidArgument("image attention mask of crop " + std::to_string(b) +
                               " is not a top-left rectangle of valid patches (" + std::to_string(vr) + " rows x " +
                               std::to_string(vc) + " columns); pass the image processor's mask unchanged");
      key_valid[b * N + i] = m[i] != 0;
      any_masked = any_masked || m[i] == 0;
    }
    const std::vector<int64_t> ids = NavitPositionIds(vr, vc, P);
    for (int64_t i = 0; i < N; ++i) {
      position_.Row(ids[i], pos.data());
      float* row = h.data() + (b * N + i) * D;
      for (int64_t d = 0; d < D; ++d) row[d] += pos[d];
    }
  }
  Tap(tap, tap_prefix + "embeddings", h, {B, N, D});
  VisionCropBatch cb;
  cb.crops = B;
  cb.h = std::move(h);
  cb.valid = std::move(key_valid);
  cb.any_masked = any_masked;
  return cb;
}

void VisionModel::RunLayers(VisionCropBatch& cb, int64_t count, ThreadPool* pool, TensorTap* tap,
                            const std::string& tap_prefix) const {
  const int64_t P = patches_per_side_, D = cfg_.hidden_size, N = P * P, B = cb.crops, rows = B * N;
  std::vector<float>& h = cb.h;
  const size_t end = static_cast<size_t>(std::min<int64_t>(cb.layer + count, static_cast<int64_t>(layers_.size())));
  // Phi4MultimodalVisionEncoderLayer x layers_to_run_ (pre-LN; eager attention, bidirectional;
  // the additive mask removes padded keys of every crop when any patch of the call is padded).
  const int64_t I = cfg_.intermediate_size, nh = cfg_.num_attention_heads, hd = D / nh;
  std::vector<float> x(static_cast<size_t>(rows * D)), q(x.size()), k(x.size()), v(x.size()), att(x.size()),
      mid(static_cast<size_t>(rows * I));
  const BatchAttentionShape shape{B, N, nh, hd, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))};
  const float eps = static_cast<float>(cfg_.layer_norm_eps);
  for (size_t li = static_cast<size_t>(cb.layer); li < end; ++li) {
    const Layer& L = layers_[li];
    LayerNorm(h.data(), L.ln1_w.data(), L.ln1_b.data(), rows, D, eps, x.data(), pool);
    Apply(L.q, x.data(), rows, q.data(), pool);
    Apply(L.k, x.data(), rows, k.data(), pool);
    Apply(L.v, x.data(), rows, v.data(), pool);
    BidirectionalAttention(q.data(), k.data(), v.data(), cb.any_masked ? cb.valid.data() : nullptr, shape,
                           att.data(), pool);
    L.out.w.MatMul(att.data(), rows, x.data(), pool);
    AddBiasResidual(h.data(), x.data(), L.out.b.data(), rows, D, pool);  // h += out_proj(att)
    LayerNorm(h.data(), L.ln2_w.data(), L.ln2_b.data(), rows, D, eps, x.data(), pool);
    L.fc1.w.MatMul(x.data(), rows, mid.data(), pool);
    AddBiasGeluTanh(mid.data(), L.fc1.b.data(), rows, I, pool);  // mid = gelu_tanh(fc1(x)): [rows, I]
    L.fc2.w.MatMul(mid.data(), rows, x.data(), pool);
    AddBiasResidual(h.data(), x.data(), L.fc2.b.data(), rows, D, pool);  // h += fc2(mid)
    Tap(tap, tap_prefix + "layer." + std::to_string(li), h, {B, N, D});
  }
  cb.layer = static_cast<int64_t>(end);
}

// Phi4MultimodalImageEmbedding.get_img_features + forward for one image.
Result<std::vector<float>> VisionModel::Encode(const ProcessedImage& img, ThreadPool* pool, TensorTap* tap,
                                               const std::string& tap_prefix) const {
  ThreadPool local(1);
  if (pool == nullptr) pool = &local;
  // The caller keeps `img` alive for this call: an aliasing pointer that owns nothing.
  PHI4MM_ASSIGN_OR_RETURN(VisionEncodeJob job,
                          StartEncode(std::shared_ptr<const ProcessedImage>(std::shared_ptr<void>(), &img), tap,
                                      tap_prefix));
  // Crops go through the encoder in groups of kCropsPerGroup, which bounds the activations (~300 MB
  // per group at SigLIP-so400m's size, where 37 crops at once took 1.7 GB); with a tap, as one batch,
  // so each named tensor covers every crop.
  constexpr int64_t kCropsPerGroup = 4;
  while (!job.encoded()) PHI4MM_RETURN_IF_ERROR(job.Step(tap != nullptr ? job.crops() : kCropsPerGroup, pool));
  return job.Finish(pool);
}

Result<VisionEncodeJob> VisionModel::StartEncode(std::shared_ptr<const ProcessedImage> image, TensorTap* tap,
                                                 const std::string& tap_prefix) const {
  const ProcessedImage& img = *image;
  const int64_t P = patches_per_side_, S = cfg_.image_size;
  if (img.crop_size != S || img.patches_per_side != P)
    return InvalidArgument("processed image has crop_size " + std::to_string(img.crop_size) + " and " +
                           std::to_string(img.patches_per_side) + " patches per side; the vision model expects " +
                           std::to_string(S) + " and " + std::to_string(P) +
                           " (process the image with this model's preprocessor settings)");
  if (img.hd_height <= 0 || img.hd_width <= 0 || img.hd_height % S != 0 || img.hd_width % S != 0)
    return InvalidArgument("processed image size " + std::to_string(img.hd_height) + "x" +
                           std::to_string(img.hd_width) + " is not a positive multiple of the crop size " +
                           std::to_string(S));
  const int64_t gh = img.hd_height / S, gw = img.hd_width / S, crops = 1 + gh * gw;
  if (img.num_crops < crops)
    return InvalidArgument("processed image has " + std::to_string(img.num_crops) + " crops but its " +
                           std::to_string(gh) + "x" + std::to_string(gw) + " grid needs " + std::to_string(crops) +
                           " (1 global + HD crops)");
  if (static_cast<int64_t>(img.pixel_values.size()) != img.num_crops * 3 * S * S ||
      static_cast<int64_t>(img.attention_mask.size()) != img.num_crops * P * P)
    return InvalidArgument("processed image buffers do not match " + std::to_string(img.num_crops) +
                           " crops: pixel_values has " + std::to_string(img.pixel_values.size()) +
                           " values, attention_mask " + std::to_string(img.attention_mask.size()));
  VisionEncodeJob job;
  job.model_ = this;
  job.image_ = std::move(image);
  job.gh_ = gh;
  job.gw_ = gw;
  job.crops_ = crops;
  job.tap_ = tap;
  job.tap_prefix_ = tap_prefix;
  const int64_t F = (P + 1) / 2;
  job.pooled_.resize(static_cast<size_t>(crops * F * F * cfg_.hidden_size));
  return job;
}

Status VisionEncodeJob::Step(int64_t n, ThreadPool* pool) {
  const VisionModel& m = *model_;
  const ProcessedImage& img = *image_;
  const int64_t P = m.patches_per_side_, S = m.cfg_.image_size;
  const int64_t c0 = next_, b = std::min(n, crops_ - next_);
  if (b <= 0) return Status::Ok();
  if (crop_) return Internal("VisionEncodeJob::Step called while StepLayers has a crop in flight");
  ThreadPool local(1);
  if (pool == nullptr) pool = &local;
  // Crops past 1 + gh*gw (batch padding) never reach the output, so they are not encoded.
  PHI4MM_ASSIGN_OR_RETURN(std::vector<float> feat,
                          m.EncodeCrops(img.pixel_values.data() + c0 * 3 * S * S, img.attention_mask.data() + c0 * P * P,
                                        b, pool, tap_, tap_prefix_));
  PoolCrops(feat, b, pool);
  return Status::Ok();
}

Status VisionEncodeJob::StepLayers(int64_t layers, ThreadPool* pool) {
  if (encoded() || layers <= 0) return Status::Ok();
  const VisionModel& m = *model_;
  const ProcessedImage& img = *image_;
  const int64_t P = m.patches_per_side_, S = m.cfg_.image_size;
  ThreadPool local(1);
  if (pool == nullptr) pool = &local;
  if (!crop_) {
    PHI4MM_ASSIGN_OR_RETURN(VisionCropBatch cb,
                            m.EmbedCrops(img.pixel_values.data() + next_ * 3 * S * S,
                                         img.attention_mask.data() + next_ * P * P, 1, pool, tap_, tap_prefix_));
    crop_ = std::move(cb);
  }
  m.RunLayers(*crop_, layers, pool, tap_, tap_prefix_);
  if (crop_->layer == static_cast<int64_t>(m.layers_.size())) {
    PoolCrops(crop_->h, 1, pool);
    crop_.reset();
  }
  return Status::Ok();
}

// feat: [b, P*P, D]; AvgPool2d(2, 2) over each [P, P] grid (ReflectionPad2d((0,1,0,1)) first when
// P is odd) into pooled [crops, F*F, D].
void VisionEncodeJob::PoolCrops(const std::vector<float>& feat, int64_t b, ThreadPool* pool) {
  const VisionModel& m = *model_;
  const int64_t P = m.patches_per_side_, D = m.cfg_.hidden_size, F = (P + 1) / 2;
  AvgPool2x2(feat.data(), b, P, P, D, pooled_.data() + next_ * F * F * D, pool);
  next_ += b;
}

Result<std::vector<float>> VisionEncodeJob::Finish(ThreadPool* pool) {
  if (!encoded())
    return Internal("vision encoding finished after " + std::to_string(next_) + " of " + std::to_string(crops_) +
                    " crops");
  const VisionModel& m = *model_;
  const ProcessedImage& img = *image_;
  const int64_t P = m.patches_per_side_, D = m.cfg_.hidden_size, T = m.text_hidden_, F = (P + 1) / 2;
  const int64_t gh = gh_, gw = gw_, crops = crops_;
  ThreadPool local(1);
  if (pool == nullptr) pool = &local;
  const std::vector<float> pooled = std::move(pooled_);
  next_ = 0;  // finished: the job is spent
  TensorTap* tap = tap_;
  const std::string& tap_prefix = tap_prefix_;
  Tap(tap, tap_prefix + "pooled", pooled, {crops, F * F, D});

  // Useful area of the HD grid: the crop masks sampled at [0::2, 0::2], laid out spatially.
  auto ds_mask = [&](int64_t r, int64_t c) {  // r < F*gh, c < F*gw
    const int64_t crop = 1 + (r / F) * gw + c / F;
    return img.attention_mask[(crop * P + (r % F) * 2) * P + (c % F) * 2] != 0;
  };
  int64_t uh = 0, uw = 0;
  for (int64_t r = 0; r < F * gh; ++r) uh += ds_mask(r, 0);
  for (int64_t c = 0; c < F * gw; ++c) uw += ds_mask(0, c);
  const int64_t n_tok = uh * (uw + 1) + 1 + F * (F + 1);
  if (img.num_tokens != n_tok)
    return InvalidArgument("processed image says " + std::to_string(img.num_tokens) +
                           " placeholder tokens but its mask gives " + std::to_string(n_tok) + " (" +
                           std::to_string(uh) + " x " + std::to_string(uw) + " useful HD tokens)");

  // sub_glb order: HD tokens row-major over the useful [uh, uw] area, each row followed by
  // sub_GN; then glb_GN; then the global crop's [F, F] tokens, each row followed by sub_GN.
  std::vector<float> seq(static_cast<size_t>(n_tok * D));
  float* o = seq.data();
  auto put = [&](const float* src) {
    std::memcpy(o, src, sizeof(float) * D);
    o += D;
  };
  for (int64_t r = 0; r < uh; ++r) {
    for (int64_t c = 0; c < uw; ++c) {
      const int64_t crop = 1 + (r / F) * gw + c / F;
      put(pooled.data() + ((crop * F + r % F) * F + c % F) * D);
    }
    put(m.sub_gn_.data());
  }
  put(m.glb_gn_.data());
  for (int64_t r = 0; r < F; ++r) {
    for (int64_t c = 0; c < F; ++c) put(pooled.data() + (r * F + c) * D);
    put(m.sub_gn_.data());
  }
  Tap(tap, tap_prefix + "separated", seq, {n_tok, D});

  // img_projection_up -> exact GELU -> img_projection_down: [n_tok, D] -> [n_tok, T].
  std::vector<float> up(static_cast<size_t>(n_tok * T)), out(static_cast<size_t>(n_tok * T));
  m.Apply(m.proj_up_, seq.data(), n_tok, up.data(), pool);
  GeluErfInPlace(up.data(), static_cast<int64_t>(up.size()));
  m.Apply(m.proj_down_, up.data(), n_tok, out.data(), pool);
  Tap(tap, tap_prefix + "features", out, {n_tok, T});
  return out;
}

}  // namespace phi4mm
