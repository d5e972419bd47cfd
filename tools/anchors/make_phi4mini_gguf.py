#!/usr/bin/env python3
"""Writes a random-weight GGUF with the exact shapes of Phi-4-mini, the text decoder inside
Phi-4-multimodal-instruct, so that llama.cpp can be timed as an anchor next to our decoder.

The file uses llama.cpp's `phi3` architecture with the metadata keys and tensor names that
llama.cpp's convert_hf_to_gguf.py (Phi3MiniModel) writes for Phi-4-mini: partial rotary
(rope dimension count 96 of head_dim 128), LongRoPE (rope_factors_long/short, 48 values each, and
the attention factor sqrt(1 + ln(131072/4096) / ln(4096))), sliding_window 262144 as in the config,
fused qkv (5120 rows) and gate_up (16384 rows, stored as ffn_up), and a tied embedding (no
output.weight, so llama.cpp reuses token_embd.weight for the lm_head). The vocabulary is the real
o200k-based one from the bundled tokenizer (`gpt2` model, `gpt-4o` pre-tokenizer), padded with
[PADi] to 200064 entries. Matrices are F16 with values drawn from N(0, 0.02²), norms are F32 around
1, and the long rope factors are the real ones. The weights are random, so the text it generates
is gibberish; only speed means anything.

Tensors are generated and written in row chunks, so RAM use stays at a few hundred MB while the
~7.7 GB file is written. Needs numpy and the `gguf` package (pip install gguf).

Usage: python tools/anchors/make_phi4mini_gguf.py OUT.gguf [--seed 0] [--layers 32]
       [--tokenizer tests/fixtures/tiny/native]
Then, e.g.: llama-quantize OUT.gguf OUT-Q4_0.gguf Q4_0   (see tools/anchors/README.md)
"""
import argparse
import json
import math
import os
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_phi4mini_gguf.py: needs the gguf package (pip install gguf)")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tools", "fullsize"))
from make_full_checkpoint import LONG_FACTOR  # noqa: E402  (the real config's long_factor)

# Phi-4-mini decoder hyper-parameters (config.json of Phi-4-multimodal-instruct).
VOCAB = 200064
HIDDEN = 3072
LAYERS = 32
HEADS = 24
KV_HEADS = 8
HEAD_DIM = HIDDEN // HEADS                      # 128
INTERMEDIATE = 8192
RMS_EPS = 1e-5
CONTEXT = 131072
ORIGINAL_CONTEXT = 4096
ROPE_THETA = 10000.0
PARTIAL_ROTARY = 0.75
ROPE_DIMS = int(PARTIAL_ROTARY * HIDDEN) // HEADS   # 96, as the converter computes it
SLIDING_WINDOW = 262144
QKV_ROWS = HIDDEN + 2 * KV_HEADS * HEAD_DIM     # 5120
CHUNK_ELEMS = 1 << 24                           # ~16 M values (64 MB f32) generated at a time


def tensor_plan(n_layers):
    """(name, numpy shape [rows, cols], kind) in the order the converter emits them."""
    plan = [("token_embd.weight", (VOCAB, HIDDEN), "matrix")]
    for i in range(n_layers):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (HIDDEN,), "norm"),
            (b + "attn_qkv.weight", (QKV_ROWS, HIDDEN), "matrix"),
            (b + "attn_output.weight", (HIDDEN, HIDDEN), "matrix"),
            (b + "ffn_norm.weight", (HIDDEN,), "norm"),
            (b + "ffn_up.weight", (2 * INTERMEDIATE, HIDDEN), "matrix"),
            (b + "ffn_down.weight", (HIDDEN, INTERMEDIATE), "matrix"),
        ]
    plan += [
        ("output_norm.weight", (HIDDEN,), "norm"),
        ("rope_factors_long.weight", (ROPE_DIMS // 2,), "rope_long"),
        ("rope_factors_short.weight", (ROPE_DIMS // 2,), "rope_short"),
    ]
    return plan


def load_vocab(tok_dir):
    """Token strings, token types, merges and special ids from a Hugging Face tokenizer folder."""
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        tc = json.load(f)
    by_id = {i: s for s, i in tj["model"]["vocab"].items()}
    special = {}
    for a in tj.get("added_tokens", []):
        by_id[a["id"]] = a["content"]
        special[a["id"]] = a["special"]
    if max(by_id) >= VOCAB:
        raise ValueError(f"tokenizer id {max(by_id)} does not fit the vocab of {VOCAB}")
    tokens, types = [], []
    for i in range(VOCAB):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        s = by_id[i]
        tokens.append(s)
        if i in special:
            looks_special = s.startswith("<|") and s.endswith("|>")
            types.append(gguf.TokenType.CONTROL if special[i] or looks_special
                         else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    ids = {s: i for i, s in by_id.items()}

    def special_id(key):
        v = tc.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return ids.get(v) if v is not None else None

    return {
        "tokens": tokens, "types": types, "merges": merges,
        "bos": special_id("bos_token"), "eos": special_id("eos_token"),
        "unk": special_id("unk_token"), "pad": special_id("pad_token"),
        "add_bos": bool(tc.get("add_bos_token", False)), "add_eos": bool(tc.get("add_eos_token", False)),
        "chat_template": tc.get("chat_template"),
    }


def write_metadata(w, n_layers, vocab):
    w.add_name("Phi-4-mini random (phi4mm anchor)")
    w.add_context_length(CONTEXT)
    w.add_rope_scaling_orig_ctx_len(ORIGINAL_CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(INTERMEDIATE)
    w.add_block_count(n_layers)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_dimension_count(ROPE_DIMS)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_sliding_window(SLIDING_WINDOW)
    scale = CONTEXT / ORIGINAL_CONTEXT
    w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(ORIGINAL_CONTEXT)))

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    w.add_token_merges(vocab["merges"])
    for key, add in (("bos", w.add_bos_token_id), ("eos", w.add_eos_token_id),
                     ("unk", w.add_unk_token_id), ("pad", w.add_pad_token_id)):
        if vocab[key] is not None:
            add(vocab[key])
    w.add_add_bos_token(vocab["add_bos"])
    w.add_add_eos_token(vocab["add_eos"])
    if vocab["chat_template"]:
        w.add_chat_template(vocab["chat_template"])


def chunks(rng, shape, kind):
    """Yields the tensor's values, row block by row block, in its file dtype."""
    if kind == "norm":
        yield (1.0 + 0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        return
    if kind == "rope_long":
        yield np.asarray(LONG_FACTOR, dtype=np.float32)
        return
    if kind == "rope_short":
        yield np.ones(shape, dtype=np.float32)
        return
    rows, cols = shape
    step = max(1, CHUNK_ELEMS // cols)
    for r in range(0, rows, step):
        n = min(step, rows - r)
        block = rng.standard_normal((n, cols), dtype=np.float32)
        block *= 0.02
        yield block.astype(np.float16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=LAYERS, help="decoder layers (32; fewer for a smoke test)")
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "tests", "fixtures", "tiny", "native"),
                    help="folder with tokenizer.json and tokenizer_config.json")
    args = ap.parse_args()
    if len(LONG_FACTOR) != ROPE_DIMS // 2:
        raise SystemExit(f"long_factor has {len(LONG_FACTOR)} values, expected {ROPE_DIMS // 2}")

    vocab = load_vocab(args.tokenizer)
    plan = tensor_plan(args.layers)
    w = gguf.GGUFWriter(args.out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.PHI3])
    write_metadata(w, args.layers, vocab)
    for name, shape, kind in plan:
        dtype = np.float16 if kind == "matrix" else np.float32
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    # Tensor data, streamed: the same alignment rule the writer's offsets assume (each tensor
    # starts at a multiple of the alignment and is padded to one).
    fout = w.fout[0]
    rng = np.random.default_rng(args.seed)
    total = 0
    for k, (name, shape, kind) in enumerate(plan):
        w.write_padding(fout, fout.tell())
        nbytes = 0
        for block in chunks(rng, shape, kind):
            block.tofile(fout)
            nbytes += block.nbytes
        w.write_padding(fout, nbytes)
        total += nbytes
        if kind == "matrix" and (name.startswith("token_embd") or name.endswith("ffn_down.weight")):
            print(f"  [{k + 1}/{len(plan)}] {name} {shape}  {total / 1e9:.2f} GB", flush=True)
    w.close()
    n_params = sum(int(np.prod(s)) for _, s, _ in plan)
    print(f"wrote {args.out}: {len(plan)} tensors, {n_params / 1e9:.3f} G parameters, "
          f"{os.path.getsize(args.out) / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
