#!/usr/bin/env python3
"""Generates the vision reference fixtures in tests/fixtures/tiny/reference/vision/ from the committed tiny model.

The tiny native checkpoint (tests/fixtures/tiny/native, written by make_fixtures.py) is loaded with transformers
4.57.1 (eager attention, float32) plus its PEFT adapters, the vision adapter is made active, and two synthetic PIL
images of different shapes go through transformers' Phi4MultimodalImageProcessorFast:

  A  448x300 (W x H): 1x1 grid, the bottom 10 patch rows padded            -> 2 crops, 460 image tokens
  B  600x448       : 2x1 grid, the right crop has 11 valid patch columns  -> 3 crops, 641 image tokens

Per image the script dumps the processor outputs, the vision tower's feature layer (hidden state feature_layer,
last crop only, to keep the files small), the 2x2-pooled crops, the separated (sub_glb) features
and the projected features [num_img_tokens, 48].  Then end to end: one prompt with image A, one with A and B,
greedy generation with the vision LoRA; the live-id logits of every step and the greedy tokens are dumped in the
format of make_fixtures.py (step.{k}.logits over live_ids, non-live logits exactly 0).

Pixel values are stored so that the C++ input equals the Python input bit for bit: a crop whose every value is the
processor's normalisation of some uint8 is stored as uint8 codes plus the 256-entry table `pixel_lut`; any other
crop (the bicubic global view of a multi-crop image) is stored as float16 and the reference model is fed those
float16-rounded values.  Deterministic (fixed seeds, CPU, one thread).  Usage, from the repository root:

    tools/reference/.venv/bin/python tools/reference/make_vision_fixtures.py
"""

import json
import os

import numpy as np
import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

from PIL import Image  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import Phi4MultimodalForCausalLM  # noqa: E402
from transformers.models.phi4_multimodal.image_processing_phi4_multimodal_fast import (  # noqa: E402
    Phi4MultimodalImageProcessorFast,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NATIVE = os.path.join(REPO, "tests", "fixtures", "tiny", "native")
OUT = os.path.join(REPO, "tests", "fixtures", "tiny", "reference", "vision")
SEED = 4321
STEPS = 6
IMAGE_TOKEN = 200010

IMAGES = {"A": (448, 300), "B": (600, 448)}  # (width, height)
CASES = [
    ("one_image", ["A"], "<|user|><|image_1|>Describe the picture.<|end|><|assistant|>"),
    ("two_images", ["A", "B"], "<|user|><|image_1|><|image_2|>Compare the two pictures.<|end|><|assistant|>"),
]


def synthetic_image(width, height, seed):
    """Smooth colour gradients plus noise and a few bars: non-degenerate content in every patch."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 127 + 100 * np.sin(x / 37.0 + seed) * np.cos(y / 23.0)
    g = 127 + 100 * np.cos((x + y) / 51.0)
    b = 127 + 100 * np.sin(y / 17.0 - x / 61.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 20, size=(height, width, 3))
    img[(x.astype(int) // 40) % 5 == 0] *= 0.5
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), mode="RGB")


def pixel_lut(processor):
    """The processor's float32 value for every uint8 level (one 256x1 grey image per channel value)."""
    ramp = np.tile(np.arange(256, dtype=np.uint8)[:, None, None], (1, 1, 3))
    ramp = np.ascontiguousarray(np.tile(ramp, (1, 448, 1)))  # 256 x 448 x 3: each row one level
    big = np.zeros((448, 448 * 1, 3), dtype=np.uint8)
    luts = []
    for start in (0, 128):  # two 448x448 images hold rows of levels start..start+127 (each level repeated)
        big[:] = 0
        for i in range(448):
            big[i, :, :] = start + (i * 128) // 448
        out = processor(images=[Image.fromarray(big, mode="RGB")], return_tensors="pt")
        crop = out["image_pixel_values"][0, 1]  # the HD crop (no resize: 448x448 input)
        for lvl in range(128):
            rows = [i for i in range(448) if (i * 128) // 448 == lvl]
            v = crop[:, rows, :].reshape(-1)
            assert torch.all(v == v[0]), "the normalisation is not a function of the uint8 level"
            luts.append(float(v[0]))
    lut = torch.tensor(luts, dtype=torch.float32)
    assert lut.shape == (256,)
    return lut


def encode_crop(crop, lut):
    """uint8 codes if every value is exactly lut[code], else None."""
    flat = crop.reshape(-1)
    idx = torch.searchsorted(lut, flat).clamp(max=255)
    if torch.equal(lut[idx], flat):
        return idx.to(torch.uint8).reshape(crop.shape)
    return None


def navit_buckets(n_side):
    """bucket_coords of Phi4MultimodalVisionEmbeddings.forward for every valid count 1..n_side (row n-1, -1 padded)."""
    boundaries = torch.arange(1 / n_side, 1.0, 1 / n_side)
    table = torch.full((n_side, n_side), -1, dtype=torch.int64)
    for n in range(1, n_side + 1):
        nb = torch.ones(n_side, dtype=torch.long)[:n].sum()  # a 0-dim int64 tensor, as mask.sum() gives
        coords = torch.bucketize(torch.arange(0, 1 - 1e-6, 1 / nb), boundaries, right=True)
        assert coords.shape == (n,)
        table[n - 1, :n] = coords
    return table


def set_vision(model):
    model.enable_adapters()
    model.set_adapter("vision")


@torch.no_grad()
def image_dump(model, key, proc_out, lut):
    """Stores the processor outputs (bit-exact form) and the vision intermediates of one image."""
    pix = proc_out["image_pixel_values"][0].float()  # [crops, 3, 448, 448]
    mask = proc_out["image_attention_mask"][0]  # [crops, 32, 32]
    sizes = proc_out["image_sizes"][0]
    n_tok = int(proc_out["num_img_tokens"][0])
    crops = pix.shape[0]
    tensors = {}
    fed = torch.empty_like(pix)
    kinds = []
    for c in range(crops):
        codes = encode_crop(pix[c], lut)
        if codes is not None:
            tensors[f"{key}.crop.{c}.u8"] = codes.contiguous()
            fed[c] = lut[codes.long()]
            kinds.append("u8")
        else:
            h = pix[c].to(torch.float16)
            tensors[f"{key}.crop.{c}.f16"] = h.contiguous()
            fed[c] = h.float()
            kinds.append("f16")
    assert torch.equal(fed[[i for i, k in enumerate(kinds) if k == "u8"]],
                       pix[[i for i, k in enumerate(kinds) if k == "u8"]])
    tensors[f"{key}.attention_mask"] = mask.to(torch.int64).contiguous()
    tensors[f"{key}.image_sizes"] = sizes.to(torch.int64).contiguous()
    tensors[f"{key}.num_img_tokens"] = torch.tensor([n_tok], dtype=torch.int64)

    ie = model.model.embed_tokens_extend.image_embed
    vt = ie.img_processor
    cap = {"proj_in": [], "proj_out": []}
    hooks = [
        vt.embeddings.register_forward_hook(lambda m, a, out: cap.__setitem__("emb", out)),
        ie.img_projection_up.register_forward_pre_hook(lambda m, a: cap["proj_in"].append(a[0])),
        ie.img_projection_down.register_forward_hook(lambda m, a, out: cap["proj_out"].append(out)),
    ]
    for i, layer in enumerate(vt.encoder.layers):
        hooks.append(layer.register_forward_hook(lambda m, a, out, i=i: cap.__setitem__(f"layer.{i}", out)))
    pooled = ie.get_img_features(fed, attention_mask=mask.bool())  # [crops, 256, 32]
    feature_index = len(vt.encoder.layers) + 1 + model.config.vision_config.feature_layer  # index into hidden_states
    out = vt(fed, patch_attention_mask=mask.bool(), output_hidden_states=True)
    hs = out.hidden_states
    # check_model_inputs records [embeddings, layer 0, ..., layer n-2, post_layernorm(layer n-1)].
    n_layers = len(vt.encoder.layers)
    assert len(hs) == n_layers + 1 and torch.equal(hs[0], cap["emb"])
    for i in range(n_layers - 1):
        assert torch.equal(hs[i + 1], cap[f"layer.{i}"])
    assert torch.equal(hs[-1], vt.post_layernorm(cap[f"layer.{n_layers - 1}"]))
    feat = hs[model.config.vision_config.feature_layer]
    assert torch.equal(feat, cap[f"layer.{feature_index - 1}"])
    # The embedding's own forward (the merge into a sequence of n_tok placeholders).
    ids = torch.full((1, n_tok), IMAGE_TOKEN, dtype=torch.long)
    embeds = torch.zeros((1, n_tok, model.config.hidden_size))
    merged = ie(ids, embeds, image_pixel_values=fed[None], image_sizes=sizes[None], image_attention_mask=mask[None])
    for h in hooks:
        h.remove()
    assert len(cap["proj_in"]) == 1 and cap["proj_in"][0].shape == (1, n_tok, vt.config.hidden_size)
    features = cap["proj_out"][0][0]
    assert torch.equal(merged[0], features)
    tensors[f"{key}.feature_layer.last_crop"] = feat[-1].contiguous()
    tensors[f"{key}.pooled"] = pooled.contiguous()
    tensors[f"{key}.separated"] = cap["proj_in"][0][0].contiguous()
    tensors[f"{key}.features"] = features.contiguous()
    meta = {"size_wh": list(IMAGES[key]), "crops": crops, "crop_storage": kinds,
            "image_sizes": sizes.tolist(), "num_img_tokens": n_tok,
            "valid_rows": [int(mask[c, :, 0].sum()) for c in range(crops)],
            "valid_cols": [int(mask[c, 0, :].sum()) for c in range(crops)],
            "feature_hidden_state_index": feature_index}
    return tensors, fed, meta


def expand_prompt(tok, rendered, counts):
    """processing_phi4mm: <|image_N|> -> <|endoftext10|>, tokenize, each 200010 -> its image's token count."""
    import re
    text = re.sub(r"<\|image_\d+\|>", "<|endoftext10|>", rendered)
    ids = tok.encode(text, add_special_tokens=False).ids
    out, k = [], 0
    for t in ids:
        if t == IMAGE_TOKEN:
            out += [IMAGE_TOKEN] * counts[k]
            k += 1
        else:
            out.append(t)
    assert k == len(counts)
    return out


@torch.no_grad()
def run_case(model, name, keys, rendered, tok, images, live_t, live_mask):
    counts = [images[k]["num_img_tokens"] for k in keys]
    ids = expand_prompt(tok, rendered, counts)
    max_crops = max(images[k]["fed"].shape[0] for k in keys)
    pix = torch.zeros((len(keys), max_crops, 3, 448, 448))
    mask = torch.ones((len(keys), max_crops, 32, 32), dtype=torch.long)
    for b, k in enumerate(keys):
        n = images[k]["fed"].shape[0]
        pix[b, :n] = images[k]["fed"]
        mask[b, :n] = images[k]["mask"]
    sizes = torch.stack([images[k]["sizes"] for k in keys])
    input_ids = torch.tensor([ids])
    ie = model.model.embed_tokens_extend.image_embed
    cap = []
    h = ie.img_projection_down.register_forward_hook(lambda m, a, out: cap.append(out[0]))
    gen = model.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), image_pixel_values=pix, image_attention_mask=mask,
        image_sizes=sizes, max_new_tokens=STEPS, min_new_tokens=0, do_sample=False, num_beams=1,
        output_logits=True, return_dict_in_generate=True, pad_token_id=199999)
    h.remove()
    # The batched call's features equal the per-image dumps (same crops; batch padding is dropped).
    assert len(cap) == len(keys)
    max_feat_diff = 0.0
    for b, k in enumerate(keys):
        max_feat_diff = max(max_feat_diff, float((cap[b] - images[k]["features"]).abs().max()))
    assert max_feat_diff < 1e-5, max_feat_diff
    greedy = gen.sequences[0, len(ids):].tolist()
    assert len(greedy) == STEPS, f"{name}: stopped early: {greedy}"
    tensors = {"input_ids": torch.tensor(ids, dtype=torch.int64), "greedy": torch.tensor(greedy, dtype=torch.int64),
               "live_ids": live_t}
    for s, lg in enumerate(gen.logits):
        lg = lg[0].float()
        assert torch.all(lg[~live_mask] == 0), f"{name}: non-live logits are not exactly zero"
        top = torch.topk(lg, 2).values
        assert top[0] > 0 and top[0] != top[1], f"{name}: ambiguous argmax at step {s}"
        assert int(torch.argmax(lg)) == greedy[s] and live_mask[greedy[s]]
        tensors[f"step.{s}.logits"] = lg[live_t].contiguous()
    meta = {"name": name, "images": keys, "rendered": rendered, "image_token_counts": counts,
            "input_ids_len": len(ids), "steps": STEPS, "greedy": greedy, "lora": "vision",
            "file": f"{name}.safetensors", "max_abs_diff_batched_vs_single_features": max_feat_diff}
    return tensors, meta


def main():
    model = Phi4MultimodalForCausalLM.from_pretrained(NATIVE, dtype=torch.float32, attn_implementation="eager")
    for name in ("vision", "speech"):
        model.load_adapter(os.path.join(NATIVE, f"{name}-lora"), adapter_name=name)
    model.eval()
    set_vision(model)
    assert model.config.vision_config._attn_implementation == "eager"
    tok = Tokenizer.from_file(os.path.join(NATIVE, "tokenizer.json"))
    processor = Phi4MultimodalImageProcessorFast()
    lut = pixel_lut(processor)
    live_t = load_file(os.path.join(REPO, "tests", "fixtures", "tiny", "reference", "live_ids.safetensors"))["live_ids"]
    live_mask = torch.zeros(model.config.vocab_size, dtype=torch.bool)
    live_mask[live_t] = True

    os.makedirs(OUT, exist_ok=True)
    img_tensors = {"pixel_lut": lut, "navit_buckets": navit_buckets(448 // 14)}
    images, img_meta = {}, {}
    for i, (key, (w, h)) in enumerate(IMAGES.items()):
        pil = synthetic_image(w, h, SEED + i)
        proc_out = processor(images=[pil], return_tensors="pt")
        tensors, fed, meta = image_dump(model, key, proc_out, lut)
        img_tensors.update(tensors)
        images[key] = {"fed": fed, "mask": proc_out["image_attention_mask"][0].long(),
                       "sizes": proc_out["image_sizes"][0], "num_img_tokens": meta["num_img_tokens"],
                       "features": tensors[f"{key}.features"]}
        img_meta[key] = meta
        print(key, json.dumps(meta))
    save_file(img_tensors, os.path.join(OUT, "images.safetensors"), metadata={"format": "pt"})

    cases = []
    for name, keys, rendered in CASES:
        tensors, meta = run_case(model, name, keys, rendered, tok, images, live_t, live_mask)
        save_file(tensors, os.path.join(OUT, meta["file"]), metadata={"format": "pt"})
        cases.append(meta)
        print(name, json.dumps(meta))
    index = {
        "description": "Vision reference dumps of the tiny model; see tools/reference/make_vision_fixtures.py",
        "transformers": "4.57.1", "torch": torch.__version__.split("+")[0], "attn_implementation": "eager",
        "pixel_storage": "crop.{c}.u8 -> pixel_lut[code] (bit-exact processor output); crop.{c}.f16 -> float16 "
                         "values the reference model was fed",
        "images": img_meta, "cases": cases,
    }
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"vision fixtures: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
