#!/usr/bin/env python3
"""Generates the tiny Phi-4-multimodal reference fixtures in tests/fixtures/tiny/.

A tiny random `Phi4MultimodalForCausalLM` (transformers 4.57.1, eager attention, float32) with two PEFT LoRA
adapters is built, saved in the ORIGINAL Microsoft layout (tests/fixtures/tiny/orig/) and in the native
transformers layout (tests/fixtures/tiny/native/), reloaded to prove the files are faithful, and run on a
few chat prompts to produce reference dumps (tests/fixtures/tiny/reference/).

Everything is deterministic (fixed seeds, CPU, single thread): running the script twice gives identical bytes.
See docs/fixtures.md.  Usage (from the repository root):

    bash tools/reference/setup_venv.sh && tools/reference/.venv/bin/python tools/reference/make_fixtures.py
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch

torch.set_num_threads(1)  # bitwise-reproducible CPU reductions
torch.use_deterministic_algorithms(True)

from peft import LoraConfig  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import Phi4MultimodalConfig, Phi4MultimodalForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layouts  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "fixtures", "tiny")
SEED = 1234

# ----------------------------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------------------------

# LongRoPE factors, len = rotary_ndims/2 = int(8*0.75)/2 = 3.  short != all-ones and != long, so that a C++ mixup
# of the two tables (or ignoring the short factors as "always 1") shows up immediately.
SHORT_FACTOR = [1.0, 1.25, 1.5]
LONG_FACTOR = [1.5, 3.0, 7.5]

TEXT = dict(
    vocab_size=200064,
    hidden_size=48,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    hidden_act="silu",
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    rope_theta=10000.0,
    partial_rotary_factor=0.75,
    rope_scaling={"type": "longrope", "short_factor": SHORT_FACTOR, "long_factor": LONG_FACTOR},
    original_max_position_embeddings=32,
    max_position_embeddings=512,
    sliding_window=262144,
    bos_token_id=199999,
    eos_token_id=[199999, 200020],
    pad_token_id=199999,
    embd_pdrop=0.0,
    resid_pdrop=0.0,
    attention_dropout=0.0,
    initializer_range=0.02,
)

# Native (HF) names.  image_size == crop_size == 448 and patch 14 keep the real processor geometry (32x32 patches).
VISION = dict(
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=3,
    num_attention_heads=2,
    num_channels=3,
    image_size=448,
    patch_size=14,
    hidden_act="gelu_pytorch_tanh",
    layer_norm_eps=1e-6,
    crop_size=448,
    image_token_id=200010,
    feature_layer=-2,
)

AUDIO = dict(
    hidden_size=32,
    intermediate_size=48,
    num_blocks=2,
    num_attention_heads=2,
    activation="swish",
    chunk_size=-1,
    left_chunk=18,
    dropout_rate=0.0,
    ext_pw_out_channel=32,
    depthwise_separable_out_channel=32,
    depthwise_multiplier=1,
    kernel_size=3,
    conv_activation="swish",
    input_size=80,
    conv_glu_type="swish",
    time_reduction=8,
    bias_max_distance=500,
    bias_symmetric=False,
    nemo_activation="relu",
    nemo_conv_channels=16,
    downsample_rate=1,
    audio_token_id=200011,
    feature_layer=-2,
)

# LoRA targets: the regex of convert_phi4_multimodal_weights_to_hf.py (module names of Phi4MultimodalForCausalLM).
LORA_TARGET_REGEX = r"model.layers.\d+.((self_attn.(qkv|o)_proj)|(mlp.(gate_up|down)_proj))"
# Different ranks AND different scales (alpha/r = 2 and 0.5) so that mixing the adapters up is visible.
LORAS = {
    "vision": dict(r=4, lora_alpha=8, dp=0.0),
    "speech": dict(r=6, lora_alpha=3, dp=0.01),
}

GENERATION_CONFIG = {"bos_token_id": 199999, "eos_token_id": [200020, 199999], "pad_token_id": 199999}

# ----------------------------------------------------------------------------------------------------------------
# Prompts and cases
# ----------------------------------------------------------------------------------------------------------------

PROMPTS = {
    # ~15 tokens
    "short": "Name three primary colors, please, in a short list.",
    # ~45 tokens (> original_max_position_embeddings = 32): long factors from the very first forward
    "long": (
        "Write a short story about a lighthouse keeper who discovers that the old radio in the tower can talk to "
        "ships from the past, and explain in detail what she decides to do about it and why, in five paragraphs."
    ),
    # ~28 tokens: 28 + 10 decode steps crosses 32 while decoding
    "cross": "Translate into French, keeping the tone light: the quick brown fox jumps over the lazy dog near the river "
    "bank this morning.",
}

CASES = [
    # name, prompt key, lora mode, number of generated tokens
    ("short_none", "short", "none", 8),
    ("short_vision", "short", "vision", 8),
    ("short_speech", "short", "speech", 8),
    ("long_prompt_none", "long", "none", 6),
    ("long_prompt_vision", "long", "vision", 6),
    ("cross_none", "cross", "none", 10),
    ("cross_speech", "cross", "speech", 10),
]


def chat_prompt(text):
    """The Phi-4-mm chat template for one user turn + generation prompt (no BOS, no system turn)."""
    return "<|user|>" + text + "<|end|><|assistant|>"


# ----------------------------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------------------------


def bf16_round(t):
    """Rounds float32 values to the nearest bfloat16-representable float32 value."""
    return t.to(torch.bfloat16).to(torch.float32)


def build_tokenizer(out_dir):
    script = os.path.join(REPO, "tools", "tokenizer", "build_tokenizer_json.py")
    if not os.path.exists(script):
        sys.exit(f"missing {script} (the tokenizer builder); cannot render the prompts")
    subprocess.run([sys.executable, script, "--out", out_dir], check=True, stdout=subprocess.DEVNULL)
    return Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))


def make_config():
    config = Phi4MultimodalConfig(**TEXT, vision_config=dict(VISION), audio_config=dict(AUDIO))
    config._attn_implementation = "eager"
    return config


def randomize_(model, live_ids, gen):
    """Fills every parameter and persistent buffer with non-degenerate random bf16-representable values."""
    state = model.state_dict()  # shares storage with the parameters / buffers
    for name in sorted(state):
        t = state[name]
        if not t.is_floating_point():
            continue
        shape = t.shape
        if name.endswith("global_invstd"):  # audio feature normalisation: positive scales
            v = 0.5 + torch.rand(shape, generator=gen)
        elif name.endswith("global_mean"):
            v = 2.0 * torch.randn(shape, generator=gen)
        elif ("norm" in name or "layer_norm" in name) and name.endswith("weight"):
            v = 1.0 + 0.1 * torch.randn(shape, generator=gen)  # RMSNorm / LayerNorm gains around 1
        elif name.endswith("bias") or name.endswith(".b1") or name.endswith(".b2"):
            v = 0.05 * torch.randn(shape, generator=gen)
        elif name == "model.embed_tokens.weight":
            v = torch.zeros(shape)
            v[live_ids] = 0.2 * torch.randn((len(live_ids), shape[1]), generator=gen)
        elif name.endswith("feature_extensor") or name.endswith("position_embedding.weight"):
            v = 0.2 * torch.randn(shape, generator=gen)
        elif name.endswith("relative_attention_bias_layer.bias_values.weight"):
            v = 0.5 * torch.randn(shape, generator=gen)
        else:
            fan_in = max(1, t[0].numel()) if t.dim() > 1 else shape[0]
            std = min(0.2, max(0.02, fan_in ** -0.5))
            v = std * torch.randn(shape, generator=gen)
        with torch.no_grad():
            t.copy_(bf16_round(v))


def add_loras_(model, gen):
    """Adds the two PEFT LoRA adapters and fills lora_A / lora_B with random non-zero bf16 values."""
    for adapter, spec in LORAS.items():
        cfg = LoraConfig(
            r=spec["r"],
            lora_alpha=spec["lora_alpha"],
            target_modules=LORA_TARGET_REGEX,
            lora_dropout=spec["dp"],
            task_type="CAUSAL_LM",
        )
        model.add_adapter(cfg, adapter_name=adapter)
    state = model.state_dict()
    n = 0
    for name in sorted(state):
        if ".lora_A." in name or ".lora_B." in name:
            t = state[name]
            v = 0.1 * torch.randn(t.shape, generator=gen)
            v = torch.where(v.abs() < 1e-3, torch.full_like(v, 1e-3), v)  # strictly non-zero
            with torch.no_grad():
                t.copy_(bf16_round(v))
            n += 1
    assert n == 2 * 2 * 4 * TEXT["num_hidden_layers"], n
    model.eval()


def set_mode(model, mode):
    """none = adapters disabled (LANGUAGE mode), vision / speech = that adapter active (ORIG InputMode table)."""
    if mode == "none":
        model.disable_adapters()
    else:
        model.enable_adapters()
        model.set_adapter(mode)


# ----------------------------------------------------------------------------------------------------------------
# Reference runs
# ----------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def prefill_dump(model, input_ids):
    """Runs one forward pass and captures embeds / per-layer outputs / final-norm output with hooks."""
    base = model.model
    captured = {}
    hooks = [base.layers[0].register_forward_pre_hook(
        lambda m, args, kw: captured.__setitem__("embeds", args[0] if args else kw["hidden_states"]),
        with_kwargs=True)]
    for i, layer in enumerate(base.layers):
        hooks.append(layer.register_forward_hook(
            lambda m, a, out, i=i: captured.__setitem__(f"layer.{i}", out[0] if isinstance(out, tuple) else out)))
    hooks.append(base.norm.register_forward_hook(lambda m, a, out: captured.__setitem__("norm", out)))
    out = model(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    # Cross-check against HF's own hidden_states tuple: [embeds, layer0, ..., layer_{n-2}, norm(layer_{n-1})].
    hs = out.hidden_states
    assert torch.equal(hs[0], captured["embeds"])
    for i in range(len(base.layers) - 1):
        assert torch.equal(hs[i + 1], captured[f"layer.{i}"])
    assert torch.equal(hs[-1], captured["norm"]) or torch.equal(hs[-1], captured[f"layer.{len(base.layers) - 1}"])
    captured["logits"] = out.logits
    return {k: v[0].float().contiguous() for k, v in captured.items()}


@torch.no_grad()
def ideal_greedy(model, input_ids, steps):
    """Greedy decode that recomputes the whole sequence (no cache, causal) each step: the 'textbook' reference."""
    ids = input_ids
    logits_out, tokens = [], []
    for _ in range(steps):
        logits = model(input_ids=ids, use_cache=False).logits[0, -1]
        logits_out.append(logits)
        nxt = int(torch.argmax(logits))
        tokens.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return logits_out, tokens


@torch.no_grad()
def run_case(model, name, ids, mode, steps, live_ids, live_mask):
    set_mode(model, mode)
    input_ids = torch.tensor([ids], dtype=torch.long)
    dump = prefill_dump(model, input_ids)
    gen = model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=steps,
        min_new_tokens=0,
        do_sample=False,
        num_beams=1,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=199999,
    )
    greedy = gen.sequences[0, len(ids):].tolist()
    assert len(greedy) == steps, f"{name}: generation stopped early (EOS) after {len(greedy)} tokens: {greedy}"
    tensors = {
        "prefill.embeds": dump["embeds"],
        "prefill.norm": dump["norm"],
        "greedy": torch.tensor(greedy, dtype=torch.int64),
        "input_ids": torch.tensor(ids, dtype=torch.int64),
    }
    for i in range(TEXT["num_hidden_layers"]):
        tensors[f"prefill.layer.{i}"] = dump[f"layer.{i}"]
    ideal_logits, ideal_tokens = ideal_greedy(model, input_ids, steps)
    max_ideal_diff = 0.0
    for k, lg in enumerate(gen.logits):
        lg = lg[0].float()
        assert torch.all(lg[~live_mask] == 0), f"{name}: non-live logits are not exactly zero"
        top = torch.topk(lg, 2).values
        assert top[0] > 0 and top[0] != top[1], f"{name}: ambiguous argmax at step {k}"
        assert int(torch.argmax(lg)) == greedy[k]
        assert live_mask[greedy[k]]
        tensors[f"step.{k}.logits"] = lg[live_ids].contiguous()
        tensors[f"ideal.step.{k}.logits"] = ideal_logits[k][live_ids].float().contiguous()
        max_ideal_diff = max(max_ideal_diff, float((lg - ideal_logits[k]).abs().max()))
    # The prefill forward and generate's first step are the same computation (up to the lm_head row count).
    assert torch.allclose(dump["logits"][-1], gen.logits[0][0], atol=1e-5, rtol=0)
    tensors["ideal.greedy"] = torch.tensor(ideal_tokens, dtype=torch.int64)
    meta = {
        "name": name,
        "lora": mode,
        "input_ids": ids,
        "prompt_tokens": len(ids),
        "steps": steps,
        "greedy": greedy,
        "ideal_greedy": ideal_tokens,
        "max_abs_diff_generate_vs_ideal": max_ideal_diff,
        "file": f"{name}.safetensors",
        "tensors": sorted(tensors),
    }
    return tensors, meta


def rope_tables(model, n=64):
    """The exact cos/sin HF uses (attention_factor included) for the short and long tables, positions 0..n-1."""
    rot = model.model.rotary_emb
    x = torch.zeros(1, dtype=torch.float32)
    pos = torch.arange(n)[None]
    out = {}
    short_inv = rot.original_inv_freq
    long_inv, factor = rot.rope_init_fn(rot.config, None, seq_len=TEXT["original_max_position_embeddings"] + 1)
    assert factor == rot.attention_scaling
    for tag, inv in (("short", short_inv), ("long", long_inv)):
        # Same expression order as Phi4MultimodalRotaryEmbedding.forward.
        freqs = (inv[None, :, None].float() @ pos[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        out[f"rope.{tag}.cos"] = (emb.cos() * rot.attention_scaling)[0].contiguous()
        out[f"rope.{tag}.sin"] = (emb.sin() * rot.attention_scaling)[0].contiguous()
        out[f"rope.{tag}.inv_freq"] = inv.float().contiguous()
    # Sanity: the module itself gives the short table up to 32 positions and the long one beyond.
    c, s = rot(x, torch.arange(32)[None])
    assert torch.equal(c[0], out["rope.short.cos"][:32]) and torch.equal(s[0], out["rope.short.sin"][:32])
    c, s = rot(x, pos)
    assert torch.equal(c[0], out["rope.long.cos"]) and torch.equal(s[0], out["rope.long.sin"])
    rot(x, torch.arange(4)[None])  # restore the short inv_freq buffer
    out["rope.attention_factor"] = torch.tensor([rot.attention_scaling], dtype=torch.float32)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Multimodal smoke check (no dumps yet)
# ----------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def smoke_multimodal(model, gen):
    report = {}
    set_mode(model, "vision")
    # One 448x448 image: 1x1 grid -> crops = [global, crop0]; mask all ones; image_sizes = [448, 448].
    n = VISION["image_size"] // VISION["patch_size"]  # 32
    pix = torch.rand((1, 2, 3, 448, 448), generator=gen) * 2 - 1
    mask = torch.ones((1, 2, n, n), dtype=torch.long)
    sizes = torch.tensor([[448, 448]])
    half = n // 2
    n_img = half * half + half + 1 + half * (half + 1)  # 256 + 16 + 1 + 272 = 545
    ids = [200021] + [200010] * n_img + [4827, 13, 200020, 200019]
    captured = {}
    h = model.model.embed_tokens_extend.image_embed.register_forward_hook(
        lambda m, a, out: captured.__setitem__("img", out))
    out = model(input_ids=torch.tensor([ids]), image_pixel_values=pix, image_attention_mask=mask, image_sizes=sizes)
    h.remove()
    assert torch.isfinite(out.logits).all()
    report["image"] = {
        "image_pixel_values": list(pix.shape), "image_attention_mask": list(mask.shape),
        "image_sizes": sizes.tolist(), "num_img_tokens": n_img, "input_len": len(ids),
        "merged_embeds": list(captured["img"].shape), "logits": list(out.logits.shape),
    }
    set_mode(model, "speech")
    t_frames = 77  # ceil(77 / 8) = 10 audio tokens
    feats = torch.randn((1, t_frames, 80), generator=gen) * 2 + 5
    n_aud = -(-t_frames // AUDIO["time_reduction"])
    ids = [200021] + [200011] * n_aud + [4827, 13, 200020, 200019]
    enc = {}
    h = model.model.embed_tokens_extend.audio_embed.encoder.register_forward_hook(
        lambda m, a, out: enc.__setitem__("enc", out))
    out = model(input_ids=torch.tensor([ids]), audio_input_features=feats,
                audio_embed_sizes=torch.tensor([n_aud]))
    h.remove()
    assert torch.isfinite(out.logits).all()
    report["audio"] = {
        "audio_input_features": list(feats.shape), "audio_embed_sizes": [n_aud], "input_len": len(ids),
        "encoder_output": list(enc["enc"].shape), "logits": list(out.logits.shape),
    }
    set_mode(model, "none")
    return report


# ----------------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------------


def dir_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=OUT, help="output directory (default tests/fixtures/tiny)")
    args = parser.parse_args()
    out = args.out

    tmp = tempfile.mkdtemp(prefix="phi4mm-fixtures-")
    try:
        tok_dir = os.path.join(tmp, "tok")
        tok = build_tokenizer(tok_dir)

        # 1. Prompts -> ids (the live-id set must contain every id a fixture feeds to the model).
        prompt_ids = {k: tok.encode(chat_prompt(v), add_special_tokens=False).ids for k, v in PROMPTS.items()}
        live = set(range(4096)) | set(range(199999, 200064))
        for ids in prompt_ids.values():
            live |= set(ids)
        live_ids = sorted(live)
        live_t = torch.tensor(live_ids, dtype=torch.int64)
        live_mask = torch.zeros(TEXT["vocab_size"], dtype=torch.bool)
        live_mask[live_t] = True

        # 2. Model.
        torch.manual_seed(SEED)
        gen = torch.Generator().manual_seed(SEED)
        config = make_config()
        model = Phi4MultimodalForCausalLM(config).eval()
        randomize_(model, live_t, gen)
        model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        add_loras_(model, gen)

        # 3. Save both layouts.
        if os.path.exists(out):
            shutil.rmtree(out)
        orig_dir, native_dir, ref_dir = (os.path.join(out, d) for d in ("orig", "native", "reference"))
        for d in (orig_dir, native_dir, ref_dir):
            os.makedirs(d)
        full_state = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        layouts.save_orig(orig_dir, full_state, TEXT, VISION, AUDIO, LORAS, LORA_TARGET_REGEX, GENERATION_CONFIG)
        layouts.save_native(native_dir, full_state, config, LORAS, LORA_TARGET_REGEX, GENERATION_CONFIG)
        for d in (orig_dir, native_dir):
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copyfile(os.path.join(tok_dir, f), os.path.join(d, f))

        # 4. Reference dumps (made from the in-memory model; the reload check below proves the files equal it).
        cases_meta = []
        for name, prompt, mode, steps in CASES:
            tensors, meta = run_case(model, name, prompt_ids[prompt], mode, steps, live_ids, live_mask)
            tensors["live_ids"] = live_t
            save_file(tensors, os.path.join(ref_dir, meta["file"]), metadata={"format": "pt"})
            cases_meta.append(meta)
            print(f"{name:20s} prompt={meta['prompt_tokens']:3d} greedy={meta['greedy']} "
                  f"generate-vs-ideal={meta['max_abs_diff_generate_vs_ideal']:.3g}")
        rope = rope_tables(model)
        rope["live_ids"] = live_t
        save_file(rope, os.path.join(ref_dir, "rope.safetensors"), metadata={"format": "pt"})
        save_file({"live_ids": live_t}, os.path.join(ref_dir, "live_ids.safetensors"), metadata={"format": "pt"})
        smoke = smoke_multimodal(model, torch.Generator().manual_seed(SEED + 1))

        index = {
            "description": "Reference dumps of the tiny Phi-4-multimodal model; see docs/fixtures.md",
            "transformers": "4.57.1", "torch": torch.__version__.split("+")[0], "peft": "0.17.1",
            "attn_implementation": "eager", "dtype": "float32 compute on bf16-representable weights",
            "live_ids_count": len(live_ids),
            "logits_layout": "step.{k}.logits[j] = logits[live_ids[j]]; every other logit is exactly 0",
            "eos_token_id": GENERATION_CONFIG["eos_token_id"],
            "lora": {k: {"r": v["r"], "lora_alpha": v["lora_alpha"], "scale": v["lora_alpha"] / v["r"]}
                     for k, v in LORAS.items()},
            "rope": {"short_factor": SHORT_FACTOR, "long_factor": LONG_FACTOR,
                     "original_max_position_embeddings": TEXT["original_max_position_embeddings"],
                     "max_position_embeddings": TEXT["max_position_embeddings"],
                     "attention_factor": float(rope["rope.attention_factor"][0])},
            "prompts": {k: {"text": PROMPTS[k], "rendered": chat_prompt(PROMPTS[k]), "ids": prompt_ids[k]}
                        for k in PROMPTS},
            "cases": cases_meta,
            "multimodal_smoke": smoke,
        }
        with open(os.path.join(ref_dir, "cases.json"), "w") as f:
            json.dump(index, f, indent=1)
            f.write("\n")

        # 5. Reload checks: native (transformers + PEFT load_adapter) and orig (re-mapped through the conversion
        #    script's rules) must reproduce the in-memory model exactly.
        layouts.verify_native(native_dir, model, set_mode, prompt_ids["cross"])
        layouts.verify_orig(orig_dir, native_dir, full_state)
        print("reload checks: OK")
        print("smoke:", json.dumps(smoke))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    for sub in ("orig", "native", "reference"):
        print(f"{sub:10s} {dir_size(os.path.join(out, sub)) / 1e6:8.2f} MB")
    print(f"{'total':10s} {dir_size(out) / 1e6:8.2f} MB")


if __name__ == "__main__":
    main()
