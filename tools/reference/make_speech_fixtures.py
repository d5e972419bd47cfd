#!/usr/bin/env python3
"""Generates the speech-part reference fixtures in tests/fixtures/tiny/reference/speech/.

Loads the committed tiny model (tests/fixtures/tiny/native + both PEFT adapters, as make_fixtures.py's reload
check does), feeds it random log-mel clips (fixed seed) and dumps, per clip, the Conformer encoder's intermediate
tensors and both projections, then three end-to-end greedy decodes (audio alone with the speech LoRA, two clips in
one prompt, image + audio with the vision LoRA and the vision-speech projection).  Deterministic; needs the
tools/reference/.venv of setup_venv.sh.  Usage (from the repository root):

    tools/reference/.venv/bin/python tools/reference/make_speech_fixtures.py
"""

import json
import math
import os
import shutil

import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import Phi4MultimodalForCausalLM  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(REPO, "tests", "fixtures", "tiny")
NATIVE = os.path.join(TINY, "native")
OUT = os.path.join(TINY, "reference", "speech")
SEED = 4321
MAX_SEQ_LEN = 500  # Phi4MultimodalAudioModel.forward: encoder frames per chunk (after subsampling)
ORIGINAL_MAX_POS = 32  # tiny text config; the generate() re-prefill at this switch is non-causal (docs/fixtures.md)

# name -> frames.  77 -> 10 tokens, 42 -> 6 tokens, 4100 -> 513 encoder frames = two 500-frame chunks (13 valid +
# 487 zero-padded frames in the second).
CLIPS = {"short": 77, "second": 42, "long": 4100}
STEPS = 6
IMAGE_TOKEN, AUDIO_TOKEN = 200010, 200011


def bf16_round(t):
    return t.to(torch.bfloat16).to(torch.float32)


def random_log_mel(frames, gen):
    """Log-mel-like values (bf16-representable so the fixture can store them in bf16 without loss): a smooth
    per-band spectral envelope plus a slow time envelope plus noise, roughly in [-6, 14] like real log-mel."""
    band = torch.linspace(4.0, -2.0, 80)[None, :]
    t = torch.arange(frames, dtype=torch.float32)[:, None]
    env = 3.0 * torch.sin(t / 17.0) * torch.cos(t / 53.0)
    return bf16_round(band + env + 2.0 * torch.randn((frames, 80), generator=gen))


def set_mode(model, mode):
    if mode == "none":
        model.disable_adapters()
    else:
        model.enable_adapters()
        model.set_adapter(mode)


@torch.no_grad()
def encoder_dump(audio_embed, feats):
    """Runs Phi4MultimodalAudioModel on one clip [T, 80] with forward hooks; returns the named intermediates."""
    enc = audio_embed.encoder
    cap = {}
    hooks = [
        enc.encoder_embedding.register_forward_hook(lambda m, a, o: cap.__setitem__("normalized", o)),
        enc.embed.register_forward_hook(lambda m, a, o: cap.__setitem__("subsampled", o[0])),
    ]
    for i, layer in enumerate(enc.encoders):
        hooks.append(layer.register_forward_hook(lambda m, a, o, i=i: cap.__setitem__(f"block.{i}", o)))
    out = enc(feats[None], None)
    for h in hooks:
        h.remove()
    d = enc.config.hidden_size
    t_enc = math.ceil(feats.shape[0] / 8)
    assert out.shape == (1, t_enc, d), out.shape
    res = {
        "log_mel": feats.to(torch.bfloat16),
        "subsampled": cap["subsampled"][0],
        "encoder_output": out[0],
        "speech_projection": audio_embed.down_proj_for_speech(
            torch.nn.functional.gelu(audio_embed.up_proj_for_speech(out)))[0],
        "vision_speech_projection": audio_embed.down_proj_for_vision_speech(
            torch.nn.functional.gelu(audio_embed.up_proj_for_vision_speech(out)))[0],
    }
    if feats.shape[0] < 1000:  # the long clip's normalised input would double the fixture size
        res["normalized"] = cap["normalized"][0]
    for i in range(len(enc.encoders)):
        # Unfolded runs give [chunks, 500, D]; flattened to [chunks*500, D] including the padded tail.
        res[f"block.{i}"] = cap[f"block.{i}"].reshape(-1, d)
    return {k: v.contiguous().clone() for k, v in res.items()}


class PerClipEncoder:
    """Forward hook on the audio encoder that replaces a batched (padded) encoding by encoding every clip alone,
    the way phi4mm does (see reference-spec §4.3 / §10.3: batching changes the last tokens of shorter clips)."""

    def __init__(self, encoder):
        self.encoder, self.inner, self.batched_vs_single = encoder, False, 0.0
        self.handle = encoder.register_forward_hook(self)

    def __call__(self, module, args, out):
        if self.inner:
            return None
        feats, mask = args
        lens = mask.sum(1).tolist() if mask is not None else [feats.shape[1]] * feats.shape[0]
        self.inner = True
        rows = []
        for b, n in enumerate(lens):
            single = module(feats[b:b + 1, :n], None)[0]
            valid = single.shape[0]
            self.batched_vs_single = max(self.batched_vs_single, float((single - out[b, :valid]).abs().max()))
            pad = torch.zeros(out.shape[1] - valid, out.shape[2])
            rows.append(torch.cat([single, pad], 0))
        self.inner = False
        return torch.stack(rows)

    def remove(self):
        self.handle.remove()


@torch.no_grad()
def run_generate(model, ids, mode, live_ids, live_mask, **media):
    set_mode(model, mode)
    input_ids = torch.tensor([ids])
    cap = {}

    def grab(m, a, kw):
        cap.setdefault("embeds", (a[0] if a else kw["hidden_states"])[0].clone())

    h = model.model.layers[0].register_forward_pre_hook(grab, with_kwargs=True)
    gen = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=STEPS,
                         min_new_tokens=0, do_sample=False, num_beams=1, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=199999, **media)
    h.remove()
    greedy = gen.sequences[0, len(ids):].tolist()
    assert len(greedy) == STEPS, f"generation stopped early: {greedy}"
    t = {"input_ids": torch.tensor(ids, dtype=torch.int64), "greedy": torch.tensor(greedy, dtype=torch.int64),
         "live_ids": live_ids, "prefill.embeds": cap["embeds"].contiguous()}
    for k, lg in enumerate(gen.logits):
        lg = lg[0].float()
        assert torch.all(lg[~live_mask] == 0), "non-live logits are not exactly zero"
        top = torch.topk(lg, 2).values
        assert top[0] != top[1], f"ambiguous argmax at step {k}"
        assert int(torch.argmax(lg)) == greedy[k] and live_mask[greedy[k]]
        t[f"step.{k}.logits"] = lg[live_ids].contiguous()
    return t, greedy


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def expand(tok, rendered, image_counts=(), audio_counts=()):
    """Renders `<|image_N|>` / `<|audio_N|>` as runs of the placeholder id (runtime/chat.h EncodePrompt)."""
    ids, rest = [], rendered
    while rest:
        cut = [(rest.find(p), p) for p in ("<|image_", "<|audio_") if rest.find(p) >= 0]
        if not cut:
            ids += encode(tok, rest)
            break
        pos, p = min(cut)
        ids += encode(tok, rest[:pos])
        end = rest.index("|>", pos) + 2
        n = int(rest[pos + len(p):end - 2])
        ids += [IMAGE_TOKEN] * image_counts[n - 1] if p == "<|image_" else [AUDIO_TOKEN] * audio_counts[n - 1]
        rest = rest[end:]
    return ids


def check_switch(ids):
    n = len(ids)
    assert n > ORIGINAL_MAX_POS or n + STEPS - 1 <= ORIGINAL_MAX_POS, f"{n} tokens cross the LongRoPE switch"


def main():
    gen = torch.Generator().manual_seed(SEED)
    model = Phi4MultimodalForCausalLM.from_pretrained(NATIVE, dtype=torch.float32, attn_implementation="eager")
    for name in ("vision", "speech"):
        model.load_adapter(os.path.join(NATIVE, f"{name}-lora"), adapter_name=name)
    model.eval()
    tok = Tokenizer.from_file(os.path.join(NATIVE, "tokenizer.json"))
    live_ids = load_file(os.path.join(TINY, "reference", "live_ids.safetensors"))["live_ids"]
    live_mask = torch.zeros(model.config.vocab_size, dtype=torch.bool)
    live_mask[live_ids] = True
    audio_embed = model.model.embed_tokens_extend.audio_embed

    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    index = {"description": "Speech-part reference dumps of the tiny model; see tools/reference/make_speech_fixtures.py",
             "max_seq_len": MAX_SEQ_LEN, "clips": {}, "cases": []}

    feats = {}
    for name, frames in CLIPS.items():
        feats[name] = random_log_mel(frames, gen)
        d = encoder_dump(audio_embed, feats[name])
        save_file(d, os.path.join(OUT, f"clip_{name}.safetensors"), metadata={"format": "pt"})
        index["clips"][name] = {"frames": frames, "num_tokens": math.ceil(frames / 8),
                                "file": f"clip_{name}.safetensors", "tensors": sorted(d)}
        print(f"clip {name}: frames {frames} -> {d['encoder_output'].shape[0]} tokens")

    # 1. Audio alone: speech LoRA + speech projection.
    n_short, n_second = math.ceil(CLIPS["short"] / 8), math.ceil(CLIPS["second"] / 8)
    rendered = "<|user|><|audio_1|>Transcribe.<|end|><|assistant|>"
    ids = expand(tok, rendered, audio_counts=[n_short])
    check_switch(ids)
    t, greedy = run_generate(model, ids, "speech", live_ids, live_mask, audio_input_features=feats["short"][None],
                             audio_embed_sizes=torch.tensor([n_short]))
    cases = [("audio_alone", rendered, "speech", [], ["short"], t, greedy, None)]

    # 2. Two clips in one prompt (a batch of 2 for HF: padded features + audio_attention_mask as the processor
    #    gives them, but each clip encoded alone by the hook, as phi4mm does).
    rendered = "<|user|><|audio_1|><|audio_2|>Same speaker?<|end|><|assistant|>"
    ids = expand(tok, rendered, audio_counts=[n_short, n_second])
    check_switch(ids)
    t_max = CLIPS["short"]
    batch = torch.zeros(2, t_max, 80)
    batch[0] = feats["short"]
    batch[1, :CLIPS["second"]] = feats["second"]
    mask = torch.arange(t_max)[None, :] < torch.tensor([[CLIPS["short"]], [CLIPS["second"]]])
    hook = PerClipEncoder(audio_embed.encoder)
    t, greedy = run_generate(model, ids, "speech", live_ids, live_mask, audio_input_features=batch,
                             audio_embed_sizes=torch.tensor([n_short, n_second]), audio_attention_mask=mask)
    hook.remove()
    cases.append(("two_clips", rendered, "speech", [], ["short", "second"], t, greedy,
                  {"max_abs_diff_hf_batched_vs_single_encoder_output": hook.batched_vs_single}))

    # 3. Image + audio: vision LoRA + vision-speech projection.  One 448x448 crop grid (global + 1 crop) whose
    #    crop mask keeps only a 4x4-patch corner, so the image takes 256 + 16 + 1 + 2*3 = 279 tokens and the prompt
    #    fits the tiny model's 512-token context.
    n = 32
    pix = torch.rand((1, 2, 3, 448, 448), generator=gen) * 2 - 1
    img_mask = torch.ones((1, 2, n, n), dtype=torch.long)
    img_mask[0, 1] = 0
    img_mask[0, 1, :4, :4] = 1
    sizes = torch.tensor([[448, 448]])
    n_img = 16 * 16 + 16 + 1 + 2 * 3
    rendered = "<|user|><|image_1|><|audio_1|>Describe both.<|end|><|assistant|>"
    ids = expand(tok, rendered, image_counts=[n_img], audio_counts=[n_short])
    check_switch(ids)
    img_cap = {}

    def grab_image(m, a, o):
        img_cap.setdefault("img", o[0][torch.tensor(ids) == IMAGE_TOKEN].clone())

    h = model.model.embed_tokens_extend.image_embed.register_forward_hook(grab_image)
    t, greedy = run_generate(model, ids, "vision", live_ids, live_mask, audio_input_features=feats["short"][None],
                             audio_embed_sizes=torch.tensor([n_short]), image_pixel_values=pix,
                             image_attention_mask=img_mask, image_sizes=sizes)
    h.remove()
    assert img_cap["img"].shape == (n_img, model.config.hidden_size), img_cap["img"].shape
    t["image_features"] = img_cap["img"].contiguous()
    cases.append(("image_audio", rendered, "vision", [n_img], ["short"], t, greedy, None))

    for name, rendered, mode, img_counts, clips, tensors, greedy, extra in cases:
        save_file(tensors, os.path.join(OUT, f"{name}.safetensors"), metadata={"format": "pt"})
        meta = {"name": name, "rendered": rendered, "lora": mode, "image_token_counts": img_counts,
                "clips": clips, "audio_token_counts": [index["clips"][c]["num_tokens"] for c in clips],
                "input_ids": tensors["input_ids"].tolist(), "steps": STEPS, "greedy": greedy,
                "file": f"{name}.safetensors", "tensors": sorted(tensors)}
        meta.update(extra or {})
        index["cases"].append(meta)
        print(f"{name:12s} prompt={len(meta['input_ids']):3d} greedy={greedy} {extra or ''}")
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"speech fixtures: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
