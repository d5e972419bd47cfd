#!/usr/bin/env python3
"""Trains a small Phi-4-mini-shaped decoder (and its two LoRA adapters) on real text, for measuring quantization.

The random tiny fixture says nothing about what a user's answers lose in q8 or q4 (docs/quant-quality.md); trained
weights do. This script trains, on the CPU, a decoder with this model's architecture (GQA, partial rotary 0.75,
LongRoPE config with the real Phi-4-mini factor pattern, tied embeddings, the real o200k tokenizer and chat tokens),
then the vision and speech LoRA adapters (ranks and scales of the tiny fixture) as real deltas on other text, and
writes:

  tests/fixtures/trained/orig/       the checkpoint in the ORIGINAL Microsoft layout (layouts.save_orig), with the
                                     tiny fixture's random vision and audio towers (never trained; they only keep
                                     the layout complete)
  tests/fixtures/trained/heldout.txt the held-out evaluation text (never trained on), >= 20k tokens
  tests/fixtures/trained/SOURCES.md  where the text comes from, its license, and the training record
  --hf-out DIR (optional)            the same decoder as a Hugging Face Phi3ForCausalLM checkpoint (float32), the
                                     input of llama.cpp's convert_hf_to_gguf.py (tools/anchors/quant_quality_llamacpp.sh)

Corpus: the reStructuredText sources of the Python 3.11 documentation as the Debian package `python3.11-doc`
(3.11.2-6+deb12u9) ships them under /usr/share/doc/python3.11/html/_sources (English prose with code examples),
and the Python standard library sources of Debian's `libpython3.11-minimal` / `libpython3.11-stdlib` under
/usr/lib/python3.11 (code). Both are under the PSF License Version 2 (Debian: /usr/share/doc/python3.11/copyright).
Files are split by rules on their sorted relative paths (see `split_corpus`), so the split is fixed by the corpus.

Vocabulary: the full 200064-row o200k embedding is kept (the engine and llama.cpp see the real vocabulary), but only
the LIVE ids (the most frequent training tokens and every special token) have trained rows; every other row is exactly
zero, so its logit is exactly 0 in every format, and the file compresses. Training uses the full-vocabulary softmax
exactly: the dead ids enter the log-sum-exp as N_dead * exp(0), and a dead target's logit is 0.

Deterministic given the seed and the corpus (torch.manual_seed, 2 threads, torch.use_deterministic_algorithms).
Runs in about 50 minutes on 2 shared cores (3080 s for the committed fixture). Usage (from the repository root; torch, transformers, peft, safetensors and
tokenizers from tools/reference/requirements.txt):

    nice -n 19 PYTHON tools/reference/train_tiny_decoder.py --docs DOCS_SOURCES_DIR --stdlib /usr/lib/python3.11 \\
        [--hf-out /tmp/trained-hf]
"""

import argparse
import collections
import json
import math
import os
import re
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layouts  # noqa: E402
import make_fixtures as tiny  # noqa: E402  (tiny towers, LoRA regex, randomize_)

torch.set_num_threads(2)
torch.use_deterministic_algorithms(True)

from peft import LoraConfig, inject_adapter_in_model  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import Phi3Config, Phi3ForCausalLM, Phi4MultimodalConfig, Phi4MultimodalForCausalLM  # noqa: E402

REPO = tiny.REPO
OUT = os.path.join(REPO, "tests", "fixtures", "trained")
SEED = 4321

# Phi-4-mini's config with small sizes: head_dim 64 (rotary 48 -> 24 frequencies), GQA 2:1, every matrix dimension a
# multiple of 256 so llama.cpp's k-quants (256-wide super-blocks) apply to every tensor as on the real model.
HIDDEN, HEADS, KV_HEADS, LAYERS, INTERMEDIATE = 256, 4, 2, 4, 512
ROT_FREQS = int(HIDDEN // HEADS * 0.75) // 2  # 24
# The real long_factor (48 values, tools/fullsize/make_full_checkpoint.py) at every other entry; the short factors
# are all 1.0 as in the real model.
REAL_LONG_FACTOR = [1, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817, 2.187582649,
                    2.446418898, 2.735880826, 3.059592084, 3.421605075, 3.826451687, 4.279200023, 4.785517845,
                    5.351743533, 5.984965424, 6.693110555, 7.485043894, 8.370679318, 9.36110372, 10.4687158,
                    11.70738129, 13.09260651, 14.64173252, 16.37415215, 18.31155283, 20.47818807, 22.90118105,
                    25.61086418, 28.64115884, 32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7, 32.71,
                    32.93, 32.97, 33.28, 33.49, 33.5, 44.16, 47.77]
LONG_FACTOR = REAL_LONG_FACTOR[::2]
SHORT_FACTOR = [1.0] * ROT_FREQS
assert len(LONG_FACTOR) == ROT_FREQS

TEXT = dict(tiny.TEXT)
TEXT.update(
    hidden_size=HIDDEN,
    intermediate_size=INTERMEDIATE,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    rope_scaling={"type": "longrope", "short_factor": SHORT_FACTOR, "long_factor": LONG_FACTOR},
    original_max_position_embeddings=4096,
    max_position_embeddings=131072,
)
LORAS = tiny.LORAS  # vision r 4 alpha 8, speech r 6 alpha 3

LIVE_VOCAB = 4096     # trained embedding rows (the most frequent training tokens + every special id)
SEQ = 512             # training window = the evaluation context of docs/quant-quality.md
BATCH = 4
BASE_STEPS = 1200      # 2.5 M tokens, about one pass over the base text (held-out perplexity 948 after 400)
LORA_STEPS = 150
HELDOUT_TOKENS = 24000
CHAT_EVERY = 3        # one section in CHAT_EVERY becomes a chat turn (title as the question)


# ----------------------------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------------------------


def list_files(root, suffix):
    out = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(suffix):
                out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def split_corpus(docs_root, stdlib_root):
    """(base, heldout, vision, speech) lists of (label, text), by fixed rules on sorted relative paths."""
    docs = list_files(docs_root, ".rst.txt")
    code = [p for p in list_files(stdlib_root, ".py")
            if "/" not in p or p.split("/")[0] in ("json", "email", "http", "logging", "urllib", "importlib",
                                                    "concurrent", "asyncio", "collections", "xml", "unittest")]
    code = [p for p in code if "test" not in p.split("/")[-1] and not p.startswith(("test", "idlelib", "lib2to3"))]

    def read(root, p):
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
            return f.read()

    base, held, vision, speech = [], [], [], []
    for i, p in enumerate(docs):
        top = p.split("/")[0]
        if top == "howto":
            vision.append((p, read(docs_root, p)))
        elif top in ("c-api", "extending"):
            speech.append((p, read(docs_root, p)))
        elif top in ("whatsnew", "distutils", "install"):
            continue
        elif i % 10 == 7:
            held.append((p, read(docs_root, p)))
        else:
            base.append((p, read(docs_root, p)))
    for i, p in enumerate(code):
        (held if i % 10 == 7 else base).append(("stdlib/" + p, read(stdlib_root, p)))
    return base, held, vision, speech


HEADING = re.compile(r"^(.+)\n([=\-~^*#]{3,})\s*$", re.M)


def sections(text):
    """(title, body) of the reST sections of one document (a heading is a line underlined by = - ~ ^ * #)."""
    marks = [(m.start(), m.end(), m.group(1).strip()) for m in HEADING.finditer(text)
             if len(m.group(2)) >= len(m.group(1).strip())]
    out = []
    for k, (s, e, title) in enumerate(marks):
        end = marks[k + 1][0] if k + 1 < len(marks) else len(text)
        body = text[e:end].strip()
        title = title.strip(":`* ")
        if body and 2 <= len(title) <= 80:
            out.append((title, body))
    return out


def chat_turn(title, body):
    return "<|user|>Tell me about " + title + ".<|end|><|assistant|>" + body + "<|end|>"


def stream_ids(tok, docs, chat):
    """Token stream of documents separated by <|endoftext|>; with `chat`, every CHAT_EVERY-th doc section becomes
    a user/assistant turn, so the model learns the chat tokens."""
    eot = tok.token_to_id("<|endoftext|>")
    ids = []
    n = 0
    for label, text in docs:
        if chat and label.endswith(".rst.txt"):
            parts = []
            for title, body in sections(text):
                n += 1
                parts.append(chat_turn(title, body[:1500]) if n % CHAT_EVERY == 0 else title + "\n\n" + body)
            text = "\n\n".join(parts) if parts else text
        ids += tok.encode(text, add_special_tokens=False).ids + [eot]
    return ids


# ----------------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------------


def phi3_config(vocab):
    """Phi3Config of the decoder (`vocab` < 200064 only for the trainer's unused dummy table, without special ids)."""
    ids = dict(pad_token_id=None) if vocab < TEXT["vocab_size"] else dict(bos_token_id=199999, eos_token_id=[199999, 200020],
                                                     pad_token_id=199999)
    return Phi3Config(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, hidden_act="silu", rms_norm_eps=TEXT["rms_norm_eps"],
        tie_word_embeddings=True, rope_theta=TEXT["rope_theta"], partial_rotary_factor=TEXT["partial_rotary_factor"],
        rope_scaling=dict(TEXT["rope_scaling"]), original_max_position_embeddings=TEXT["original_max_position_embeddings"],
        max_position_embeddings=TEXT["max_position_embeddings"], sliding_window=None, embd_pdrop=0.0, resid_pdrop=0.0,
        attention_dropout=0.0, initializer_range=0.02, **ids)


class Trainer(torch.nn.Module):
    """Phi3 decoder layers (transformers) + a live-row embedding shared with the lm_head (tied).

    Row j of `emb` is the embedding of vocabulary id live_ids[j]; every other id has a zero row, so it embeds to zero
    and has logit exactly 0. The loss is the cross-entropy of the full 200064-way softmax."""

    def __init__(self, live_ids, vocab):
        super().__init__()
        self.model = Phi3ForCausalLM(phi3_config(8)).model  # 8-row dummy table (unused: inputs_embeds)
        self.model.embed_tokens = None
        self.emb = torch.nn.Parameter(0.02 * torch.randn(len(live_ids), HIDDEN))
        remap = torch.full((vocab,), -1, dtype=torch.long)
        remap[live_ids] = torch.arange(len(live_ids))
        self.register_buffer("remap", remap, persistent=False)
        self.log_dead = math.log(vocab - len(live_ids))

    def hidden(self, ids):
        j = self.remap[ids]
        x = self.emb[j.clamp(min=0)] * (j >= 0).unsqueeze(-1)
        # Training runs the decoder layers in bfloat16 autocast (CPU AMX/AVX-512 BF16 kernels); the loss head and
        # every evaluation stay float32.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.training):
            h = self.model(inputs_embeds=x, use_cache=False).last_hidden_state
        return h.float(), j

    def loss(self, ids):
        h, j = self.hidden(ids[:, :-1])
        logits = h @ self.emb.t()                                           # [B, T, live]
        dead = torch.full(logits.shape[:-1] + (1,), self.log_dead)
        lse = torch.logsumexp(torch.cat([logits, dead], dim=-1), dim=-1)
        t = self.remap[ids[:, 1:]]
        target = torch.gather(logits, -1, t.clamp(min=0).unsqueeze(-1)).squeeze(-1) * (t >= 0)
        return (lse - target).mean()


def batches(ids, steps, gen):
    n = len(ids) - SEQ - 1
    data = torch.tensor(ids, dtype=torch.long)
    for _ in range(steps):
        starts = torch.randint(0, n, (BATCH,), generator=gen)
        yield torch.stack([data[s:s + SEQ + 1] for s in starts.tolist()])


def train(module, params, ids, steps, lr, gen, tag, log):
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.05)
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))))
    t0 = time.time()
    module.train()
    for step, batch in enumerate(batches(ids, steps, gen)):
        loss = module.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            line = f"{tag} step {step:4d}/{steps} loss {loss.item():.3f} ({time.time() - t0:.0f} s)"
            print(line, flush=True)
            log.append(line)
    module.eval()


@torch.no_grad()
def eval_nll(module, ids, windows=8):
    """Mean NLL of the second half of `windows` consecutive SEQ-token windows (the perplexity tools' scoring)."""
    tot, n = 0.0, 0
    for w in range(windows):
        x = torch.tensor(ids[w * SEQ:(w + 1) * SEQ], dtype=torch.long)[None]
        h, _ = module.hidden(x)
        logits = h[0] @ module.emb.t()
        lse = torch.logsumexp(torch.cat([logits, torch.full((SEQ, 1), module.log_dead)], -1), -1)
        t = module.remap[x[0, 1:]]
        tl = torch.gather(logits[:-1], -1, t.clamp(min=0)[:, None])[:, 0] * (t >= 0)
        nll = (lse[:-1] - tl)[SEQ // 2:]
        tot += float(nll.sum())
        n += nll.numel()
    return tot / n


def bf16_(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.bfloat16).float())


# ----------------------------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------------------------


def full_embedding(module, live_ids, vocab):
    e = torch.zeros(vocab, HIDDEN)
    e[live_ids] = module.emb.detach()
    return e


def decoder_state(module, live_ids, vocab):
    """Phi3 / Phi4MM decoder tensors under the HF names (`model.layers.0.self_attn.qkv_proj.weight`, ...)."""
    st = {"model.embed_tokens.weight": full_embedding(module, live_ids, vocab)}
    for k, v in module.model.state_dict().items():
        if "lora_" in k:
            continue
        st["model." + k.replace("base_layer.", "")] = v.detach().clone()
    return st


def lora_state(module):
    """{adapter: {'layers.0.self_attn.qkv_proj.lora_A': tensor, ...}} of the trained adapters."""
    out = collections.defaultdict(dict)
    for k, v in module.model.state_dict().items():
        m = re.match(r"(.*)\.lora_(A|B)\.(\w+)\.weight$", k)
        if m:
            out[m.group(3)][f"{m.group(1)}.lora_{m.group(2)}"] = v.detach().clone()
    return out


def phi4mm_model(dec, loras):
    """The trained decoder and adapters inside a Phi4MultimodalForCausalLM with the tiny fixture's random towers."""
    config = Phi4MultimodalConfig(**TEXT, vision_config=dict(tiny.VISION), audio_config=dict(tiny.AUDIO))
    config._attn_implementation = "eager"
    model = Phi4MultimodalForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(SEED + 7)
    live = torch.nonzero(dec["model.embed_tokens.weight"].abs().sum(-1) > 0)[:, 0]
    tiny.randomize_(model, live, gen)
    for name, spec in LORAS.items():
        model.add_adapter(LoraConfig(r=spec["r"], lora_alpha=spec["lora_alpha"], target_modules=tiny.LORA_TARGET_REGEX,
                                     lora_dropout=spec["dp"], task_type="CAUSAL_LM"), adapter_name=name)
    state = model.state_dict()
    with torch.no_grad():
        for k, v in dec.items():
            key = k
            if key not in state:
                key = k.replace(".weight", ".base_layer.weight")
            assert state[key].shape == v.shape, (k, state[key].shape, v.shape)
            state[key].copy_(v)
        n = 0
        for name, tensors in loras.items():
            for k, v in tensors.items():
                key = f"model.{k}.{name}.weight"
                assert state[key].shape == v.shape, (key, state[key].shape, v.shape)
                state[key].copy_(v)
                n += 1
        assert n == 2 * 2 * 4 * LAYERS, n
    model.tie_weights()
    model.eval()
    return model, config


@torch.no_grad()
def check_phi4mm_equals_trainer(model, module, ids):
    """The exported Phi4MM model (every LoRA mode) reproduces the trainer's logits on the live ids."""
    x = torch.tensor([ids])
    live = torch.nonzero(module.remap >= 0)[:, 0]
    worst = 0.0
    for mode in ("none", "vision", "speech"):
        tiny.set_mode(model, mode)
        got = model(input_ids=x).logits[0]
        want_h, _ = module_hidden_mode(module, x, mode)
        want = want_h[0] @ module.emb.t()
        assert torch.all(got[:, module.remap < 0] == 0)
        d = float((got[:, live] - want).abs().max() / want.abs().max())
        worst = max(worst, d)
        assert d < 1e-4, (mode, d)
    tiny.set_mode(model, "none")
    return worst


def module_hidden_mode(module, x, mode):
    set_lora(module, mode)
    out = module.hidden(x)
    set_lora(module, "none")
    return out


def set_lora(module, mode):
    """Enables exactly one adapter (or none) in the injected PEFT layers of the trainer."""
    from peft.tuners.lora import LoraLayer
    for m in module.model.modules():
        if isinstance(m, LoraLayer):
            if mode == "none":
                m.enable_adapters(False)
            else:
                m.enable_adapters(True)
                m.set_adapter(mode)


def save_hf_phi3(out_dir, dec, tok_dir):
    """The base decoder as a Phi3ForCausalLM folder (float32; tied embeddings), for convert_hf_to_gguf.py."""
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    cfg = phi3_config(TEXT["vocab_size"])
    m = Phi3ForCausalLM(cfg)
    missing, unexpected = m.load_state_dict(dec, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)
    m.tie_weights()
    m.save_pretrained(out_dir, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tok_dir, f), os.path.join(out_dir, f))
    layouts.write_json(os.path.join(out_dir, "generation_config.json"), tiny.GENERATION_CONFIG)
    return m


def dir_size(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", required=True, help="python3.11-doc's html/_sources folder")
    ap.add_argument("--stdlib", required=True, help="the Python 3.11 standard library folder (/usr/lib/python3.11)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--hf-out", help="also write the decoder as an HF Phi3ForCausalLM folder here")
    ap.add_argument("--base-steps", type=int, default=BASE_STEPS)
    ap.add_argument("--lora-steps", type=int, default=LORA_STEPS)
    args = ap.parse_args()

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    tok_dir = os.path.join(REPO, "tests", "fixtures", "tiny", "orig")
    tok = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    vocab = TEXT["vocab_size"]

    base, held, vision, speech = split_corpus(args.docs, args.stdlib)
    base_ids = stream_ids(tok, base, chat=True)
    vision_ids = stream_ids(tok, vision, chat=True)
    speech_ids = stream_ids(tok, speech, chat=True)
    held_text = "\n\n".join(text for _, text in held)
    held_ids = tok.encode(held_text, add_special_tokens=False).ids
    # Cut the held-out text at a line end after HELDOUT_TOKENS tokens.
    cut = len(tok.decode(held_ids[:HELDOUT_TOKENS], skip_special_tokens=False))
    cut = held_text.find("\n", cut) + 1 or len(held_text)
    held_text = held_text[:cut]
    held_ids = tok.encode(held_text, add_special_tokens=False).ids
    assert len(held_ids) >= HELDOUT_TOKENS, len(held_ids)

    counts = collections.Counter(base_ids)
    specials = list(range(199999, vocab))
    live = set(specials)
    for t, _ in counts.most_common():
        if len(live) >= LIVE_VOCAB:
            break
        live.add(t)
    live_ids = torch.tensor(sorted(live))
    covered = sum(c for t, c in counts.items() if t in live) / len(base_ids)
    held_cov = sum(1 for t in held_ids if t in live) / len(held_ids)
    log = [f"corpus: base {len(base)} files {len(base_ids)} tokens, vision {len(vision)} files {len(vision_ids)} "
           f"tokens, speech {len(speech)} files {len(speech_ids)} tokens, held-out {len(held)} files "
           f"{len(held_ids)} tokens",
           f"steps: base {args.base_steps}, each adapter {args.lora_steps} (batch {BATCH} x {SEQ} tokens)",
           f"live vocabulary {len(live_ids)} ids: {100 * covered:.1f}% of base tokens, {100 * held_cov:.1f}% of "
           f"held-out tokens"]
    print("\n".join(log), flush=True)

    module = Trainer(live_ids, vocab)
    t0 = time.time()
    train(module, list(module.parameters()), base_ids, args.base_steps, 3e-3, gen, "base", log)
    bf16_(module)
    for p in module.parameters():
        p.requires_grad_(False)
    nll_base = eval_nll(module, held_ids)
    log.append(f"base: held-out NLL {nll_base:.3f} (perplexity {math.exp(nll_base):.1f}), {time.time() - t0:.0f} s")
    print(log[-1], flush=True)

    for name, ids in (("vision", vision_ids), ("speech", speech_ids)):
        spec = LORAS[name]
        # Trained without dropout (the speech adapter's 0.01 is kept in the saved config, as inference ignores it):
        # with PEFT's dropout active, a training step of the speech adapter took several times as long.
        cfg = LoraConfig(r=spec["r"], lora_alpha=spec["lora_alpha"], lora_dropout=0.0,
                         target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"])
        inject_adapter_in_model(cfg, module.model, adapter_name=name)
        set_lora(module, name)
        params = [p for n, p in module.model.named_parameters() if f".{name}." in n and "lora_" in n]
        for p in params:
            p.requires_grad_(True)
        before = eval_nll(module, ids[-8 * SEQ:])
        train(module, params, ids[:-8 * SEQ], args.lora_steps, 2e-3, gen, name, log)
        for p in params:
            p.requires_grad_(False)
        bf16_(module)
        after = eval_nll(module, ids[-8 * SEQ:])
        held_nll = eval_nll(module, held_ids)
        set_lora(module, "none")
        log.append(f"{name} adapter: NLL on its own text {before:.3f} -> {after:.3f}; held-out NLL {held_nll:.3f}")
        print(log[-1], flush=True)
    log.append(f"training took {time.time() - t0:.0f} s")

    dec = decoder_state(module, live_ids, vocab)
    loras = lora_state(module)
    model, config = phi4mm_model(dec, loras)
    worst = check_phi4mm_equals_trainer(model, module, held_ids[:200])
    log.append(f"exported Phi4MM model = trainer (max relative logit difference {worst:.2e} over the 3 modes)")
    print(log[-1], flush=True)

    out = args.out
    if os.path.exists(out):
        shutil.rmtree(out)
    orig_dir = os.path.join(out, "orig")
    os.makedirs(orig_dir)
    full_state = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    layouts.save_orig(orig_dir, full_state, TEXT, tiny.VISION, tiny.AUDIO, LORAS, tiny.LORA_TARGET_REGEX,
                      tiny.GENERATION_CONFIG)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tok_dir, f), os.path.join(orig_dir, f))
    with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(held_text)
    if args.hf_out:
        hf = save_hf_phi3(args.hf_out, dec, tok_dir)
        with torch.no_grad():
            x = torch.tensor([held_ids[:200]])
            tiny.set_mode(model, "none")
            d = float((hf(input_ids=x).logits - model(input_ids=x).logits).abs().max())
        log.append(f"HF Phi3 export = Phi4MM model (max abs logit difference {d:.2e})")
        print(log[-1], flush=True)
        assert d < 1e-4
    with open(os.path.join(out, "SOURCES.md"), "w") as f:
        f.write(SOURCES_MD.format(live=len(live_ids), log="\n".join("    " + line for line in log),
                                  held=", ".join(p for p, _ in held)))
    print(f"wrote {out}: {dir_size(out) / 1e6:.2f} MB")


SOURCES_MD = """# The trained fixture (`tests/fixtures/trained/`)

Written by `tools/reference/train_tiny_decoder.py` (see its docstring and docs/quant-quality.md); do not edit.

- `orig/`: a Phi-4-multimodal checkpoint in the original layout whose decoder (hidden 256, 4 layers, 4 heads of 64,
  2 KV heads, intermediate 512, partial rotary 0.75, LongRoPE, tied 200064-row embedding of which {live} rows are
  trained and the rest exactly zero) and two LoRA adapters (vision r 4 / alpha 8, speech r 6 / alpha 3) were trained
  on the text below. Its vision and audio towers are the tiny fixture's random ones (untrained).
- `heldout.txt`: the evaluation text, never trained on.

## Text and license

The reStructuredText sources of the Python 3.11 documentation, as shipped by the Debian package `python3.11-doc`
(3.11.2-6+deb12u9, `/usr/share/doc/python3.11/html/_sources/`), and Python standard library modules from Debian's
`libpython3.11-minimal` / `libpython3.11-stdlib` (3.11.2-6+deb12u6, `/usr/lib/python3.11/`). Both are
Copyright (c) 2001-2023 Python Software Foundation, under the PSF License Version 2
(https://docs.python.org/3/license.html; Debian: `/usr/share/doc/python3.11/copyright`).

Split: `howto/` trains the vision adapter, `c-api/` and `extending/` the speech adapter, `whatsnew/`, `distutils/`
and `install/` are unused; of the remaining documentation files and of the selected stdlib modules (sorted by path),
every tenth (index % 10 == 7) is held out and the rest train the base model. Held-out files: {held}.

## Training record

{log}
"""

if __name__ == "__main__":
    main()
