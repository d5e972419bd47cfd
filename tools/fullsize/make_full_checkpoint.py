#!/usr/bin/env python3
"""Writes a FULL-SIZE random Phi-4-multimodal-instruct checkpoint for speed and memory measurements.

With --size tiny-gqa it writes instead a small random checkpoint whose decoder ONNX Runtime's CPU
GroupQueryAttention accepts (head_dim 64, rotary 48, a LongRoPE switch at 32 with distinct short and
long factors, vision LoRA r=4 / speech LoRA r=6 with different alphas) and towers as small as the
tiny fixture's: the checkpoint the ONNX export is run on (tools/onnx/check_export.py).

Same tensor names, shapes and dtype (bf16) as Microsoft's original checkpoint layout
(model_type "phi4mm", reference-spec section 1.1 and 8), including the vision tower (SigLIP-so400m,
27 layers, with the unused head/post_layernorm), the speech Conformer (24 blocks), both projection
MLPs and both decoder LoRA adapters (vision r=256, speech r=320): 5.57 B parameters, ~11 GB.

The values are random (normal, std 0.02; norms around 1) — the model says nothing sensible, but
every path runs at real size. Tensors are streamed into ~4 GB shards, so RAM use stays small.

Usage: python tools/fullsize/make_full_checkpoint.py OUT_DIR [--seed 0] [--size full|tiny-gqa]
Needs numpy only. The tokenizer files are copied from tests/fixtures/tiny/orig.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# Real config.json values (reference-spec section 1.1).
LONG_FACTOR = [1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649,
               2.446418898, 2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845,
               5.351743533, 5.984965424, 6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158,
               11.70738129, 13.09260651, 14.64173252, 16.37415215, 18.31155283, 20.47818807, 22.90118105,
               25.61086418, 28.64115884, 32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7, 32.71,
               32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77]
LORA_LAYER = "layers.*((self_attn\\.(qkv_proj|o_proj))|(mlp\\.(gate_up|down)_proj))"

# Dimensions per --size: text (H hidden, I intermediate, L layers, NH/NKV heads, HD head_dim), vision (VD, VF,
# VL layers, VH heads), audio (A attention dim, U linear units, C conv channels, AB blocks, AH heads), LoRA ranks
# and alphas, and the rope switch.
SIZES = {
    "full": dict(H=3072, I=8192, L=32, NH=24, NKV=8, HD=128, VD=1152, VF=4304, VL=27, VH=16, A=1024, U=1536, C=1024,
                 AB=24, AH=16, RV=256, AV=512, RS=320, AS=640, MAXPOS=131072, ORIGPOS=4096),
    "tiny-gqa": dict(H=192, I=256, L=2, NH=3, NKV=1, HD=64, VD=32, VF=48, VL=3, VH=2, A=32, U=48, C=16, AB=2, AH=2,
                     RV=4, AV=8, RS=6, AS=18, MAXPOS=4096, ORIGPOS=32),
}


def rope_factors(z):
    half = z["HD"] * 3 // 8
    if z["HD"] == 128:
        return [1.0] * 48, LONG_FACTOR
    return [1.0 + 0.05 * i for i in range(half)], [1.5 + 0.4 * i for i in range(half)]


def config(z):
    c = base_config(z)
    if z["VD"] != 1152:  # the original layout states a non-default SigLIP tower explicitly
        c["embd_layer"]["image_embd_layer"]["vision_config"] = {
            "hidden_act": "gelu_pytorch_tanh", "hidden_size": z["VD"], "image_size": 448, "intermediate_size": z["VF"],
            "layer_norm_eps": 1e-06, "num_attention_heads": z["VH"], "num_channels": 3, "num_hidden_layers": z["VL"],
            "patch_size": 14}
    return c


def base_config(z):
    short, long_ = rope_factors(z)
    return {
        "architectures": ["Phi4MMForCausalLM"], "model_type": "phi4mm", "torch_dtype": "bfloat16",
        "transformers_version": "4.46.1", "vocab_size": 200064, "hidden_size": z["H"], "intermediate_size": z["I"],
        "num_hidden_layers": z["L"], "num_attention_heads": z["NH"], "num_key_value_heads": z["NKV"], "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "max_position_embeddings": z["MAXPOS"],
        "original_max_position_embeddings": z["ORIGPOS"], "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
        "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long_},
        "sliding_window": 262144, "attention_bias": False, "mlp_bias": False, "lm_head_bias": False,
        "full_attn_mod": 1, "interpolate_factor": 1, "embd_pdrop": 0.0, "resid_pdrop": 0.0,
        "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": 199999, "eos_token_id": 199999, "pad_token_id": 199999,
        "embd_layer": {
            "embedding_cls": "image_audio",
            "image_embd_layer": {"crop_size": 448, "embedding_cls": "tune_image",
                                 "enable_gradient_checkpointing": True, "hd_transform_order": "sub_glb",
                                 "image_token_compression_cls": "avg_pool_2d", "projection_cls": "mlp",
                                 "use_hd_transform": True, "with_learnable_separator": True},
            "audio_embd_layer": {"compression_rate": 8, "downsample_rate": 1, "embedding_cls": "audio",
                                 "enable_gradient_checkpointing": True, "projection_cls": "mlp",
                                 "use_conv_downsample": False, "use_qformer": False}},
        "audio_processor": {"name": "cascades", "config": {
            "activation": "swish", "activation_checkpointing": {"interval": 1, "module": "transformer", "offload": False},
            "attention_dim": z["A"], "attention_heads": z["AH"], "batch_norm": False, "bias_in_glu": True, "causal": True,
            "chunk_size": -1, "cnn_layer_norm": True, "conv_activation": "swish", "conv_glu_type": "swish",
            "depthwise_multiplier": 1, "depthwise_seperable_out_channel": z["A"], "dropout_rate": 0.0,
            "encoder_embedding_config": {"input_size": 80}, "ext_pw_kernel_size": 1, "ext_pw_out_channel": z["A"],
            "input_layer": "nemo_conv", "input_size": 80, "kernel_size": 3, "left_chunk": 18, "linear_units": z["U"],
            "nemo_conv_settings": {"conv_channels": z["C"]}, "num_blocks": z["AB"],
            "relative_attention_bias_args": {"t5_bias_max_distance": 500, "type": "t5"}, "time_reduction": 8}},
        "vision_lora": {"dp": 0.0, "layer": LORA_LAYER, "lora_alpha": z["AV"], "r": z["RV"]},
        "speech_lora": {"dp": 0.01, "layer": LORA_LAYER, "lora_alpha": z["AS"], "r": z["RS"]},
    }


def tensors(z):
    """(name, shape, kind) for every tensor, in the original layout's names."""
    H, I, L, V = z["H"], z["I"], z["L"], 200064
    QKV = (z["NH"] + 2 * z["NKV"]) * z["HD"]
    out = [("model.embed_tokens.weight", (V, H), "w")]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (H,), "norm"), (p + "post_attention_layernorm.weight", (H,), "norm")]
        for mod, (o, n) in {"self_attn.qkv_proj": (QKV, H), "self_attn.o_proj": (H, z["NH"] * z["HD"]),
                            "mlp.gate_up_proj": (2 * I, H), "mlp.down_proj": (H, I)}.items():
            out.append((p + mod + ".base_layer.weight", (o, n), "w"))
            for ad, r in (("vision", z["RV"]), ("speech", z["RS"])):
                out += [(p + f"{mod}.lora_A.{ad}.weight", (r, n), "w"), (p + f"{mod}.lora_B.{ad}.weight", (o, r), "w")]
    out.append(("model.norm.weight", (H,), "norm"))

    X = "model.embed_tokens_extend."
    v = X + "image_embed.img_processor."
    D, F = z["VD"], z["VF"]
    out += [(v + "embeddings.patch_embedding.weight", (D, 3, 14, 14), "w"), (v + "embeddings.patch_embedding.bias", (D,), "b"),
            (v + "embeddings.position_embedding.weight", (1024, D), "w")]
    for j in range(z["VL"]):
        p = v + f"encoder.layers.{j}."
        for ln in ("layer_norm1", "layer_norm2"):
            out += [(p + ln + ".weight", (D,), "norm"), (p + ln + ".bias", (D,), "b")]
        for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out += [(p + f"self_attn.{m}.weight", (D, D), "w"), (p + f"self_attn.{m}.bias", (D,), "b")]
        out += [(p + "mlp.fc1.weight", (F, D), "w"), (p + "mlp.fc1.bias", (F,), "b"),
                (p + "mlp.fc2.weight", (D, F), "w"), (p + "mlp.fc2.bias", (D,), "b")]
    out += [(v + "post_layernorm.weight", (D,), "norm"), (v + "post_layernorm.bias", (D,), "b"),
            (v + "head.probe", (1, 1, D), "w"), (v + "head.attention.in_proj_weight", (3 * D, D), "w"),
            (v + "head.attention.in_proj_bias", (3 * D,), "b"), (v + "head.attention.out_proj.weight", (D, D), "w"),
            (v + "head.attention.out_proj.bias", (D,), "b"), (v + "head.layernorm.weight", (D,), "norm"),
            (v + "head.layernorm.bias", (D,), "b"), (v + "head.mlp.fc1.weight", (F, D), "w"),
            (v + "head.mlp.fc1.bias", (F,), "b"), (v + "head.mlp.fc2.weight", (D, F), "w"), (v + "head.mlp.fc2.bias", (D,), "b")]
    im = X + "image_embed."
    out += [(im + "glb_GN", (1, 1, D), "w"), (im + "sub_GN", (1, 1, 1, D), "w"),
            (im + "img_projection.0.weight", (H, D), "w"), (im + "img_projection.0.bias", (H,), "b"),
            (im + "img_projection.2.weight", (H, H), "w"), (im + "img_projection.2.bias", (H,), "b")]

    a = X + "audio_embed."
    e = a + "encoder."
    C, A, U = z["C"], z["A"], z["U"]
    out += [(e + "encoder_embedding.global_mean", (80,), "b"), (e + "encoder_embedding.global_invstd", (80,), "norm"),
            (e + "embed.conv.0.weight", (C, 1, 3, 3), "w"), (e + "embed.conv.0.bias", (C,), "b"),
            (e + "embed.conv.2.weight", (C, 1, 3, 3), "w"), (e + "embed.conv.2.bias", (C,), "b"),
            (e + "embed.conv.3.weight", (C, C, 1, 1), "w"), (e + "embed.conv.3.bias", (C,), "b"),
            (e + "embed.conv.5.weight", (C, 1, 3, 3), "w"), (e + "embed.conv.5.bias", (C,), "b"),
            (e + "embed.conv.6.weight", (C, C, 1, 1), "w"), (e + "embed.conv.6.bias", (C,), "b"),
            (e + "embed.out.weight", (A, C * 10), "w"), (e + "embed.out.bias", (A,), "b"),
            (e + "relative_attention_bias_layer.bias_values.weight", (1000, z["AH"]), "w")]
    for j in range(z["AB"]):
        p = e + f"encoders.{j}."
        for ff in ("feed_forward_in", "feed_forward_out"):
            out += [(p + ff + ".layer_norm.weight", (A,), "norm"), (p + ff + ".layer_norm.bias", (A,), "b"),
                    (p + ff + ".net.0.linear.weight", (2 * U, A), "w"), (p + ff + ".net.0.linear.bias", (2 * U,), "b"),
                    (p + ff + ".net.2.weight", (A, U), "w"), (p + ff + ".net.2.bias", (A,), "b")]
        for m in ("linear_q", "linear_k", "linear_v", "linear_out"):
            out += [(p + f"self_attn.{m}.weight", (A, A), "w"), (p + f"self_attn.{m}.bias", (A,), "b")]
        out += [(p + "conv.layer_norm.weight", (A,), "norm"), (p + "conv.layer_norm.bias", (A,), "b"),
                (p + "conv.glu.ext_pw_conv_1d.weight", (2 * A, A, 1), "w"), (p + "conv.glu.ext_pw_conv_1d.bias", (2 * A,), "b"),
                (p + "conv.glu.b1", (1, A, 1), "b"), (p + "conv.glu.b2", (1, A, 1), "b"),
                (p + "conv.dw_sep_conv_1d.dw_conv.weight", (A, 1, 3), "w"), (p + "conv.dw_sep_conv_1d.dw_conv.bias", (A,), "b"),
                (p + "conv.dw_sep_conv_1d.pw_conv.weight", (A, A, 1), "w"), (p + "conv.dw_sep_conv_1d.pw_conv.bias", (A,), "b"),
                (p + "conv.ext_pw_conv_1d.weight", (A, A, 1), "w"), (p + "conv.ext_pw_conv_1d.bias", (A,), "b"),
                (p + "layer_norm_att.weight", (A,), "norm"), (p + "layer_norm_att.bias", (A,), "b"),
                (p + "layer_norm.weight", (A,), "norm"), (p + "layer_norm.bias", (A,), "b")]
    for ad in ("speech", "vision"):
        out += [(a + f"audio_projection.{ad}.0.weight", (H, A), "w"), (a + f"audio_projection.{ad}.0.bias", (H,), "b"),
                (a + f"audio_projection.{ad}.2.weight", (H, H), "w"), (a + f"audio_projection.{ad}.2.bias", (H,), "b")]
    return out


def bf16_bytes(rng, shape, kind):
    n = int(np.prod(shape))
    if kind == "norm":
        x = 1.0 + 0.05 * rng.standard_normal(n, dtype=np.float32)
    elif kind == "b":
        x = 0.01 * rng.standard_normal(n, dtype=np.float32)
    else:
        x = 0.02 * rng.standard_normal(n, dtype=np.float32)
    u = x.view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    return u.astype(np.uint16).tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-gb", type=float, default=4.0)
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    args = ap.parse_args()
    z = SIZES[args.size]
    os.makedirs(args.out_dir, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    specs = tensors(z)
    total_params = sum(int(np.prod(s)) for _, s, _ in specs)
    # Group tensors into shards by size, in order.
    shards, cur, cur_bytes = [], [], 0
    for spec in specs:
        nb = int(np.prod(spec[1])) * 2
        if cur and cur_bytes + nb > args.shard_gb * 1e9:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(spec)
        cur_bytes += nb
    shards.append(cur)
    weight_map = {}
    for si, shard in enumerate(shards):
        fname = f"model-{si + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {}, 0
        for name, shape, _ in shard:
            nb = int(np.prod(shape)) * 2
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + nb]}
            off += nb
            weight_map[name] = fname
        hjson = json.dumps(header, separators=(",", ":")).encode()
        hjson += b" " * ((8 - len(hjson) % 8) % 8)
        with open(os.path.join(args.out_dir, fname), "wb") as f:
            f.write(struct.pack("<Q", len(hjson)))
            f.write(hjson)
            for name, shape, kind in shard:
                f.write(bf16_bytes(rng, shape, kind))
        print(f"wrote {fname}: {len(shard)} tensors, {off / 1e9:.2f} GB", file=sys.stderr)
    with open(os.path.join(args.out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total_params * 2}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(config(z), f, indent=2)
    tiny = os.path.join(REPO, "tests", "fixtures", "tiny", "orig")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(tiny, name), args.out_dir)
    with open(os.path.join(args.out_dir, "preprocessor_config.json"), "w") as f:
        json.dump({"dynamic_hd": 36, "audio_compression_rate": 8, "audio_downsample_rate": 1,
                   "audio_feat_stride": 1}, f, indent=2)
    print(f"{total_params / 1e9:.3f} B parameters in {len(shards)} shards -> {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
