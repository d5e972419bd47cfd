"""Checkpoint layouts for the tiny fixtures: the ORIGINAL Microsoft layout (model_type "phi4mm", remote code) and
the native transformers layout (model_type "phi4_multimodal" + PEFT adapter folders).

The native <-> original tensor-name mapping is the one of transformers'
`convert_phi4_multimodal_weights_to_hf.py` (STATE_DICT_MAPPING + map_old_key_to_new), implemented here in both
directions.  `to_native` is the conversion script's rule set; `to_orig` is its inverse, and `verify_orig` checks
that running `to_native` over the saved original checkpoint reproduces the saved native checkpoint bit for bit.
"""

import json
import os
import re

import torch
from peft import LoraConfig
from safetensors.torch import load_file, save_file
from transformers import Phi4MultimodalForCausalLM

X = "model.embed_tokens_extend."
ENC = X + "audio_embed.encoder.encoders."

# (original regex, native replacement) exactly as in the conversion script; applied first match wins.
ORIG_TO_NATIVE = [
    (r"^" + re.escape(ENC) + r"(\d+)\.feed_forward_(in|out)\.net\.0\.linear", ENC + r"\1.feed_forward_\2.gate_up_proj"),
    (r"^" + re.escape(ENC) + r"(\d+)\.feed_forward_(in|out)\.net\.2", ENC + r"\1.feed_forward_\2.down_proj"),
    (r"^" + re.escape(ENC) + r"(\d+)\.self_attn\.linear_(q|k|v)", ENC + r"\1.self_attn.\2_proj"),
    (r"^" + re.escape(ENC) + r"(\d+)\.self_attn\.linear_out", ENC + r"\1.self_attn.o_proj"),
    (r"^" + re.escape(X) + r"image_embed\.img_projection\.0", X + "image_embed.img_projection_up"),
    (r"^" + re.escape(X) + r"image_embed\.img_projection\.2", X + "image_embed.img_projection_down"),
    (r"^" + re.escape(X) + r"image_embed\.glb_GN", X + "image_embed.global_img_feature_extensor"),
    (r"^" + re.escape(X) + r"image_embed\.sub_GN", X + "image_embed.sub_img_feature_extensor"),
    (r"^" + re.escape(X) + r"audio_embed\.audio_projection\.speech\.0", X + "audio_embed.up_proj_for_speech"),
    (r"^" + re.escape(X) + r"audio_embed\.audio_projection\.speech\.2", X + "audio_embed.down_proj_for_speech"),
    (r"^" + re.escape(X) + r"audio_embed\.audio_projection\.vision\.0", X + "audio_embed.up_proj_for_vision_speech"),
    (r"^" + re.escape(X) + r"audio_embed\.audio_projection\.vision\.2", X + "audio_embed.down_proj_for_vision_speech"),
]

# Inverse direction (native -> original).
NATIVE_TO_ORIG = [
    (r"^" + re.escape(ENC) + r"(\d+)\.feed_forward_(in|out)\.gate_up_proj", ENC + r"\1.feed_forward_\2.net.0.linear"),
    (r"^" + re.escape(ENC) + r"(\d+)\.feed_forward_(in|out)\.down_proj", ENC + r"\1.feed_forward_\2.net.2"),
    (r"^" + re.escape(ENC) + r"(\d+)\.self_attn\.(q|k|v)_proj", ENC + r"\1.self_attn.linear_\2"),
    (r"^" + re.escape(ENC) + r"(\d+)\.self_attn\.o_proj", ENC + r"\1.self_attn.linear_out"),
    (r"^" + re.escape(X) + r"image_embed\.img_projection_up", X + "image_embed.img_projection.0"),
    (r"^" + re.escape(X) + r"image_embed\.img_projection_down", X + "image_embed.img_projection.2"),
    (r"^" + re.escape(X) + r"image_embed\.global_img_feature_extensor", X + "image_embed.glb_GN"),
    (r"^" + re.escape(X) + r"image_embed\.sub_img_feature_extensor", X + "image_embed.sub_GN"),
    (r"^" + re.escape(X) + r"audio_embed\.up_proj_for_speech", X + "audio_embed.audio_projection.speech.0"),
    (r"^" + re.escape(X) + r"audio_embed\.down_proj_for_speech", X + "audio_embed.audio_projection.speech.2"),
    (r"^" + re.escape(X) + r"audio_embed\.up_proj_for_vision_speech", X + "audio_embed.audio_projection.vision.0"),
    (r"^" + re.escape(X) + r"audio_embed\.down_proj_for_vision_speech", X + "audio_embed.audio_projection.vision.2"),
]


def _apply(rules, key):
    for pat, rep in rules:
        new, n = re.subn(pat, rep, key)
        if n:
            return new
    return None


def to_native(orig_key):
    """The conversion script's map_old_key_to_new: None for LoRA keys (they go to the adapter folders)."""
    new = _apply(ORIG_TO_NATIVE, orig_key)
    if new is not None:
        return new
    if "lora" in orig_key:
        return None
    if "base_layer." in orig_key:
        return orig_key.replace("base_layer.", "")
    return orig_key


def to_orig(state_key):
    """Name of an in-memory (PEFT-wrapped) state-dict key in the original checkpoint.

    The in-memory model already carries the original decoder names (`...qkv_proj.base_layer.weight`,
    `...qkv_proj.lora_A.vision.weight`) because the original remote code wraps `self.model` with PEFT the same way.
    """
    new = _apply(NATIVE_TO_ORIG, state_key)
    return new if new is not None else state_key


def bf16(state):
    return {k: v.to(torch.bfloat16).contiguous() for k, v in state.items()}


def write_json(path, obj, sort_keys=True):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=sort_keys)
        f.write("\n")


# ------------------------------------------------------------------------------------------------------------------
# Original layout
# ------------------------------------------------------------------------------------------------------------------


def orig_config(text, vision, audio, loras, lora_regex):
    """config.json of the original checkpoint (real values of reference-spec.md 1.1, tiny sizes)."""
    # PEFT target regex as the remote code sees it: module names relative to Phi4MMModel (`layers.0.self_attn...`).
    layer_regex = r"layers.*((self_attn\.(qkv_proj|o_proj))|(mlp\.(gate_up|down)_proj))"
    cfg = {
        "architectures": ["Phi4MMForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_phi4mm.Phi4MMConfig",
            "AutoModelForCausalLM": "modeling_phi4mm.Phi4MMForCausalLM",
        },
        "model_type": "phi4mm",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.1",
        "vocab_size": text["vocab_size"],
        "hidden_size": text["hidden_size"],
        "intermediate_size": text["intermediate_size"],
        "num_hidden_layers": text["num_hidden_layers"],
        "num_attention_heads": text["num_attention_heads"],
        "num_key_value_heads": text["num_key_value_heads"],
        "hidden_act": text["hidden_act"],
        "rms_norm_eps": text["rms_norm_eps"],
        "tie_word_embeddings": text["tie_word_embeddings"],
        "max_position_embeddings": text["max_position_embeddings"],
        "original_max_position_embeddings": text["original_max_position_embeddings"],
        "rope_theta": text["rope_theta"],
        "partial_rotary_factor": text["partial_rotary_factor"],
        "rope_scaling": dict(text["rope_scaling"]),
        "sliding_window": text["sliding_window"],
        "attention_bias": False,
        "mlp_bias": False,
        "lm_head_bias": False,
        "full_attn_mod": 1,
        "interpolate_factor": 1,
        "embd_pdrop": 0.0,
        "resid_pdrop": 0.0,
        "attention_dropout": 0.0,
        "initializer_range": text["initializer_range"],
        "use_cache": True,
        "bos_token_id": 199999,
        "eos_token_id": 199999,  # the original config has a single eos; the converter forces [199999, 200020]
        "pad_token_id": 199999,
        "embd_layer": {
            "embedding_cls": "image_audio",
            "image_embd_layer": {
                "crop_size": vision["crop_size"],
                "embedding_cls": "tune_image",
                "enable_gradient_checkpointing": True,
                "hd_transform_order": "sub_glb",
                "image_token_compression_cls": "avg_pool_2d",
                "projection_cls": "mlp",
                "use_hd_transform": True,
                "with_learnable_separator": True,
                # FIXTURE-ONLY: the real checkpoint hard-codes SigLIP-so400m (hidden 1152, 27 layers, ...) in
                # vision_siglip_navit.get_siglip_vision_model and has no such block.  Loaders use these values
                # when present, else the real SigLIP ones.  Field names are transformers' SiglipVisionConfig ones.
                "vision_config": {
                    "hidden_size": vision["hidden_size"],
                    "intermediate_size": vision["intermediate_size"],
                    "num_hidden_layers": vision["num_hidden_layers"],
                    "num_attention_heads": vision["num_attention_heads"],
                    "num_channels": vision["num_channels"],
                    "image_size": vision["image_size"],
                    "patch_size": vision["patch_size"],
                    "hidden_act": vision["hidden_act"],
                    "layer_norm_eps": vision["layer_norm_eps"],
                },
            },
            "audio_embd_layer": {
                "compression_rate": audio["time_reduction"],
                "downsample_rate": audio["downsample_rate"],
                "embedding_cls": "audio",
                "enable_gradient_checkpointing": True,
                "projection_cls": "mlp",
                "use_conv_downsample": False,
                "use_qformer": False,
            },
        },
        "audio_processor": {
            "name": "cascades",
            "config": {
                "activation": audio["activation"],
                "activation_checkpointing": {"interval": 1, "module": "transformer", "offload": False},
                "attention_dim": audio["hidden_size"],
                "attention_heads": audio["num_attention_heads"],
                "batch_norm": False,
                "bias_in_glu": True,
                "causal": True,
                "chunk_size": audio["chunk_size"],
                "cnn_layer_norm": True,
                "conv_activation": audio["conv_activation"],
                "conv_glu_type": audio["conv_glu_type"],
                "depthwise_multiplier": audio["depthwise_multiplier"],
                # original (misspelled) key name
                "depthwise_seperable_out_channel": audio["depthwise_separable_out_channel"],
                "dropout_rate": audio["dropout_rate"],
                "encoder_embedding_config": {"input_size": audio["input_size"]},
                "ext_pw_kernel_size": 1,
                "ext_pw_out_channel": audio["ext_pw_out_channel"],
                "input_layer": "nemo_conv",
                "input_size": audio["input_size"],
                "kernel_size": audio["kernel_size"],
                "left_chunk": audio["left_chunk"],
                "linear_units": audio["intermediate_size"],
                "nemo_conv_settings": {"conv_channels": audio["nemo_conv_channels"]},
                "num_blocks": audio["num_blocks"],
                "relative_attention_bias_args": {"t5_bias_max_distance": audio["bias_max_distance"], "type": "t5"},
                "time_reduction": audio["time_reduction"],
            },
        },
    }
    for name, spec in loras.items():
        cfg[f"{name}_lora"] = {"r": spec["r"], "lora_alpha": spec["lora_alpha"], "dp": spec["dp"], "layer": layer_regex}
    return cfg


def orig_preprocessor_config():
    """preprocessor_config.json of the original checkpoint (remote-code processor classes)."""
    return {
        "auto_map": {
            "AutoFeatureExtractor": "processing_phi4mm.Phi4MMAudioFeatureExtractor",
            "AutoImageProcessor": "processing_phi4mm.Phi4MMImageProcessor",
            "AutoProcessor": "processing_phi4mm.Phi4MMProcessor",
        },
        "feature_extractor_type": "Phi4MMAudioFeatureExtractor",
        "image_processor_type": "Phi4MMImageProcessor",
        "processor_class": "Phi4MMProcessor",
        "audio_compression_rate": 8,
        "audio_downsample_rate": 1,
        "audio_feat_stride": 1,
        "dynamic_hd": 36,
    }


def shard_of(orig_key):
    """3 shards like the real model-0000X-of-00003: embeddings+norm / decoder layers / vision+audio towers."""
    if orig_key.startswith("model.layers."):
        return 2
    if orig_key.startswith(X):
        return 3
    return 1


def save_orig(out_dir, full_state, text, vision, audio, loras, lora_regex, generation_config):
    orig = {to_orig(k): v for k, v in full_state.items()}
    assert len(orig) == len(full_state)
    orig = bf16(orig)
    n = 3
    shards = {i: {} for i in range(1, n + 1)}
    for k in sorted(orig):
        shards[shard_of(k)][k] = orig[k]
    weight_map, total = {}, 0
    for i, tensors in shards.items():
        fname = f"model-{i:05d}-of-{n:05d}.safetensors"
        save_file(tensors, os.path.join(out_dir, fname), metadata={"format": "pt"})
        for k, v in tensors.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    write_json(os.path.join(out_dir, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    write_json(os.path.join(out_dir, "config.json"), orig_config(text, vision, audio, loras, lora_regex))
    write_json(os.path.join(out_dir, "generation_config.json"), generation_config)
    write_json(os.path.join(out_dir, "preprocessor_config.json"), orig_preprocessor_config())


# ------------------------------------------------------------------------------------------------------------------
# Native layout
# ------------------------------------------------------------------------------------------------------------------


def native_preprocessor_config():
    """preprocessor_config.json in the style of the native processor classes (refs/pr/70)."""
    return {
        "processor_class": "Phi4MultimodalProcessor",
        "image_processor_type": "Phi4MultimodalImageProcessorFast",
        "feature_extractor_type": "Phi4MultimodalFeatureExtractor",
        "dynamic_hd": 36,
        "patch_size": 14,
        "size": {"height": 448, "width": 448},
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "rescale_factor": 1.0 / 255.0,
        "feature_size": 80,
        "sampling_rate": 16000,
        "hop_length": 160,
        "n_fft": 512,
        "win_length": 400,
        "preemphasis": 0.97,
        "padding_value": 0.0,
        "audio_compression_rate": 8,
        "audio_downsample_rate": 1,
        "audio_feat_stride": 1,
        "mel_min_frequency": 0,
        "mel_max_frequency": 7690,
        "return_attention_mask": True,
    }


def native_adapter_tensors(full_state, adapter):
    """Adapter tensors as the conversion script writes them: original key with `<adapter>.` removed."""
    out = {}
    for k, v in full_state.items():
        if "lora" in k and f".{adapter}." in k:
            out[k.replace(f"{adapter}.", "")] = v
    return out


def save_native(out_dir, full_state, config, loras, lora_regex, generation_config):
    base = {}
    for k, v in full_state.items():
        if "lora" in k:
            continue
        base[k.replace("base_layer.", "")] = v
    model = Phi4MultimodalForCausalLM(config)
    missing, unexpected = model.load_state_dict(base, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)
    model.tie_weights()
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    write_json(os.path.join(out_dir, "generation_config.json"), generation_config)
    write_json(os.path.join(out_dir, "preprocessor_config.json"), native_preprocessor_config())
    for name, spec in loras.items():
        d = os.path.join(out_dir, f"{name}-lora")
        LoraConfig(
            r=spec["r"], lora_alpha=spec["lora_alpha"], target_modules=lora_regex, lora_dropout=spec["dp"],
            task_type="CAUSAL_LM",
        ).save_pretrained(d)
        tensors = bf16(native_adapter_tensors(full_state, name))
        save_file(dict(sorted(tensors.items())), os.path.join(d, "adapter_model.safetensors"),
                  metadata={"format": "pt"})


# ------------------------------------------------------------------------------------------------------------------
# Reload checks
# ------------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def verify_native(native_dir, ref_model, set_mode, ids):
    """Loads the native folder with transformers + PEFT and checks the logits equal the in-memory model's."""
    m = Phi4MultimodalForCausalLM.from_pretrained(native_dir, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    for name in ("vision", "speech"):
        m.load_adapter(os.path.join(native_dir, f"{name}-lora"), adapter_name=name)
    m.eval()
    x = torch.tensor([ids])
    for mode in ("none", "vision", "speech"):
        set_mode(m, mode)
        set_mode(ref_model, mode)
        a = m(input_ids=x).logits
        b = ref_model(input_ids=x).logits
        assert torch.equal(a, b), f"native reload mismatch in mode {mode}: {(a - b).abs().max()}"
    set_mode(ref_model, "none")


def verify_orig(orig_dir, native_dir, full_state):
    """Converts the original checkpoint with the conversion script's rules and compares it to the native files."""
    with open(os.path.join(orig_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    orig = {}
    for fname in sorted(set(index["weight_map"].values())):
        part = load_file(os.path.join(orig_dir, fname))
        for k, v in part.items():
            assert index["weight_map"][k] == fname
            assert v.dtype == torch.bfloat16
            orig[k] = v
    assert set(orig) == set(index["weight_map"])
    assert len(orig) == len(full_state)
    native = load_file(os.path.join(native_dir, "model.safetensors"))
    converted = {}
    for k, v in orig.items():
        nk = to_native(k)
        if nk is not None:
            converted[nk] = v
    assert set(converted) == set(native), set(converted) ^ set(native)
    for k in native:
        assert torch.equal(converted[k], native[k]), k
    for name in ("vision", "speech"):
        adapter = load_file(os.path.join(native_dir, f"{name}-lora", "adapter_model.safetensors"))
        extracted = {k.replace(f"{name}.", ""): v for k, v in orig.items() if "lora" in k and name in k}
        assert set(extracted) == set(adapter)
        for k in adapter:
            assert torch.equal(extracted[k], adapter[k]), k
    # And every original tensor equals the in-memory value (bf16 round trip is exact).
    for k, v in full_state.items():
        assert torch.equal(orig[to_orig(k)].float(), v), k
