#!/usr/bin/env python3
"""Quantization sensitivity of the tiny reference model (tests/fixtures/tiny); a development tool.

Loads the native layout (from_pretrained + PEFT load_adapter, as make_fixtures.py checks it), fake-quantizes the
weights in place (quantize -> dequantize; Q8_0 is a bit-exact mirror of src/phi4mm/kernels/quant.cc, Q4_K the
same algorithm) and
the activations with forward pre-hooks on the nn.Linear inputs (A8 / A8K as the engine's MatMul quantizes them),
then runs every parity case of reference/cases.json teacher-forced on the reference tokens (a fresh causal
forward per step, the `ideal.*` tensors, as tests/quant_quality_test.cc does). It prints per variant and case the
min cosine over steps of the live-id logits vs fp32, the teacher-forced argmax agreement and, for the q8-like
variants, whether free-running greedy decoding reproduces the tokens; then a Gaussian weight-noise sweep that
measures the fixture's error amplification. Deterministic, single-threaded, ~1 minute. From the repository root:

    nice -n 19 tools/reference/.venv/bin/python tools/reference/quant_sensitivity.py
"""

import json
import os
import re
import sys

import numpy as np
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (also sets 1 thread + deterministic algorithms)
from transformers import Phi4MultimodalForCausalLM  # noqa: E402

TINY = os.path.join(mf.REPO, "tests", "fixtures", "tiny")
LINEAR_RE = re.compile(r"model\.layers\.\d+\.(?:self_attn|mlp)\.(qkv_proj|o_proj|gate_up_proj|down_proj)$")

# Quantizers (float32 torch in, float32 torch out). q8_0 and act8 are exact mirrors of quant.cc, q4k its algorithm.

def _blocks(w, block):
    """[R, C] -> [R, nb, block] zero-padded (quant.cc PaddedBlock)."""
    return torch.nn.functional.pad(w, (0, -w.shape[1] % block)).reshape(w.shape[0], -1, block)


def _f16_at_least(v):
    """quant.cc F16AtLeast: the smallest f16 >= v (v >= 0), as float32 numpy."""
    h = v.astype(np.float16)  # IEEE round-to-nearest-even, like F32ToF16
    up = h.astype(np.float32) < v
    h[up] = np.nextafter(h[up], np.float16(np.inf))
    return h.astype(np.float32)


def q8_0(w):
    """Q8_0: per 32, d = F16AtLeast(amax/127), q = clamp(nearbyint(v/d), -127, 127)."""
    b = _blocks(w, 32)
    d = torch.from_numpy(_f16_at_least((b.abs().amax(-1, keepdim=True) / 127.0).numpy()))
    q = torch.where(d > 0, torch.round(b / torch.where(d > 0, d, 1.0)), 0.0).clamp(-127, 127)
    return (d * q).reshape(w.shape[0], -1)[:, : w.shape[1]]


def _nearest_level(v, step, offset):
    """quant.cc NearestLevel: clamp(nearbyint((v + offset) / step), 0, 15), 0 where step <= 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(step > 0, np.round((v + offset) / step), 0).clip(0, 15)


def _rounded_steps(v, unit):
    """quant.cc RoundedSteps: min(255, nearbyint(v / unit)), 0 where v <= 0 or unit <= 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.minimum(np.float32(255), np.round(v / unit))
    return np.where((v <= 0) | (unit <= 0), 0, n).astype(np.float32)


def _fit_sub_blocks(v):
    """quant.cc FitSubBlock over [..., 32]: the least-squares step and offset search (same algorithm;
    the sums are not accumulated in the same order, so a tie may rarely go the other way)."""
    lo = np.minimum(np.float32(0), v.min(-1))
    hi = v.max(-1)
    rng = hi - lo

    def error_of(step, offset):
        q = _nearest_level(v, step[..., None], offset[..., None])
        return ((step[..., None] * q - offset[..., None] - v) ** 2).sum(-1)

    best_step = rng / np.float32(15)
    best_offset = -lo
    best_err = error_of(best_step, best_offset)
    x = v.astype(np.float64)
    sx = x.sum(-1)
    for t in range(-10, 11):
        step0 = rng / (np.float32(15) + np.float32(0.1) * np.float32(t))
        q = _nearest_level(v, step0[..., None], -lo[..., None]).astype(np.float64)
        sq, sqq, sqx = q.sum(-1), (q * q).sum(-1), (q * x).sum(-1)
        det = 32 * sqq - sq * sq
        with np.errstate(divide="ignore", invalid="ignore"):
            step = (32 * sqx - sq * sx) / det
            base = (sqq * sx - sq * sqx) / det
            clamp = base > 0
            step = np.where(clamp, sqx / sqq, step)
        base = np.where(clamp, 0.0, base)
        ok = (det > 0) & (step > 0)
        step32 = np.where(ok, step, 1.0).astype(np.float32)
        offset32 = np.where(ok, -base, 0.0).astype(np.float32)
        better = ok & (error_of(step32, offset32) < best_err)
        best_err = np.where(better, error_of(step32, offset32), best_err)
        best_step = np.where(better, step32, best_step)
        best_offset = np.where(better, offset32, best_offset)
    zero = hi <= lo
    return np.where(zero, 0, best_step).astype(np.float32), np.where(zero, 0, best_offset).astype(np.float32)


def q4k(w):
    """Our Q4_K (quant.cc QuantizeRowQ4K / DequantizeRowQ4K): searched sub-block steps and offsets,
    stored as 8-bit multiples of f16 block scales rounded to nearest, each weight at its nearest level."""
    v = _blocks(w, 256).numpy().reshape(w.shape[0], -1, 8, 32)
    step, offset = _fit_sub_blocks(v)
    d = (step.max(-1) / np.float32(255)).astype(np.float16).astype(np.float32)[..., None]
    dmin = (offset.max(-1) / np.float32(255)).astype(np.float16).astype(np.float32)[..., None]
    step_q = d * _rounded_steps(step, d)
    offset_q = dmin * _rounded_steps(offset, dmin)
    q = _nearest_level(v, step_q[..., None], offset_q[..., None]).astype(np.float32)
    out = step_q[..., None] * q - offset_q[..., None]
    return torch.from_numpy(out.reshape(w.shape[0], -1)[:, : w.shape[1]].copy())


def act8(x, block):
    """A8 (block 32) / A8K (block 256): q = nearbyint(v * (127/amax)), value = q * (amax/127), f32 scale."""
    shape = x.shape
    b = _blocks(x.reshape(-1, shape[-1]), block)
    amax = b.abs().amax(-1, keepdim=True)
    ident = torch.where(amax > 0, 127.0 / torch.where(amax > 0, amax, 1.0), 0.0)
    out = torch.round(b * ident) * (amax / 127.0)
    return out.reshape(b.shape[0], -1)[:, : shape[-1]].reshape(shape)


def _per_block(w, block, fn):
    """Applies fn to [R, <=block] column chunks (no padding: the ideal formats see only real values)."""
    return torch.cat([fn(w[:, c:c + block].double()) for c in range(0, w.shape[1], block)], 1).float()


def _asym4(x):
    """Best asymmetric 4-bit (x ~ m + s*q, q in 0..15) per row of x, exact float s, m: a grid over clipped
    [lo, hi] ranges, each refined by alternating rounding and least-squares refits; the min-RMS one is kept."""
    lo, hi = x.min(1, keepdim=True).values, x.max(1, keepdim=True).values
    g = torch.linspace(0, 0.3, 13, dtype=x.dtype)
    a, b = torch.meshgrid(g, g, indexing="ij")
    span = hi - lo  # [R,1]
    m = (lo + a.reshape(1, -1) * span)[..., None]  # [R,K,1]
    s = ((span * (1 - a.reshape(1, -1) - b.reshape(1, -1))) / 15).clamp_min(1e-12)[..., None]
    xx = x[:, None, :]
    for _ in range(4):
        q = torch.round((xx - m) / s).clamp(0, 15)
        qm, xm = q.mean(-1, keepdim=True), xx.mean(-1, keepdim=True)
        var = ((q - qm) ** 2).mean(-1, keepdim=True)
        s_new = ((q - qm) * (xx - xm)).mean(-1, keepdim=True) / var.clamp_min(1e-30)
        ok = var > 0
        s = torch.where(ok, s_new.clamp_min(1e-12), s)
        m = torch.where(ok, xm - s * qm, xm)
    y = m + s * torch.round((xx - m) / s).clamp(0, 15)
    return y[torch.arange(x.shape[0]), ((y - xx) ** 2).sum(-1).argmin(1)]


def _sym6(x):
    """Best symmetric 6-bit (x ~ s*q, q in -32..31) per row of x, exact float s (grid + least-squares refit)."""
    amax = x.abs().max(1, keepdim=True).values.clamp_min(1e-30)
    s = (amax / torch.linspace(27, 32.5, 23, dtype=x.dtype).reshape(1, -1))[..., None]
    xx = x[:, None, :]
    for _ in range(3):
        q = torch.round(xx / s).clamp(-32, 31)
        s = torch.where((q * q).sum(-1, keepdim=True) > 0,
                        (q * xx).sum(-1, keepdim=True) / (q * q).sum(-1, keepdim=True).clamp_min(1e-30), s)
    y = s * torch.round(xx / s).clamp(-32, 31)
    return y[torch.arange(x.shape[0]), ((y - xx) ** 2).sum(-1).argmin(1)]


def ideal4(w, block=32):  # per-block asymmetric 4-bit with exact float scale and min
    return _per_block(w, block, _asym4)


def ideal6(w):  # per-16 symmetric 6-bit with an exact float scale
    return _per_block(w, 16, _sym6)


def quantize_weight(w, fmt):
    if fmt == "i4v6":  # qkv_proj of the Q4_K_M-like mix: the v rows at 6 bits
        t = mf.TEXT
        v0 = (t["num_attention_heads"] + t["num_key_value_heads"]) * (t["hidden_size"] // t["num_attention_heads"])
        return torch.cat([ideal4(w[:v0]), ideal6(w[v0:])])
    return {"q8": q8_0, "q4k": q4k, "i4": ideal4, "i4_16": lambda t: ideal4(t, 16), "i6": ideal6}[fmt](w)


# Variants: weights of decoder linears ("lin": fmt or {kind: fmt}), embedding/lm_head ("emb"), activations of
# decoder linears ("act": A8 block 32 or A8K block 256), lm_head input ("head": A8), LoRA A/B ("lora": Q8_0 + A8),
# "lora": "weights" for Q8_0 LoRA weights with float inputs; "dither": seed of 1e-6*amax Gaussian noise added before activation rounding (engine-vs-HF float noise).
Q8 = dict(lin="q8", emb="q8", act=32, head=True)
KM = {"qkv_proj": "i4v6", "o_proj": "i4", "gate_up_proj": "i4", "down_proj": "i6"}
VARIANTS = [
    ("fp32 (harness check)", {}),
    ("1  q8 engine", dict(Q8, free=True)),
    *[(f"1~ q8 engine, dither {i}", dict(Q8, dither=i)) for i in (1, 2, 3)],
    ("2  q8 weights only", dict(lin="q8", emb="q8", free=True)),
    ("3a q8, f32 emb, A8", dict(lin="q8", act=32, free=True)),
    ("3b q8, f32 emb, no A8", dict(lin="q8", free=True)),  # = "only linears Q8_0" of 4
    ("4  only emb/head Q8_0", dict(emb="q8", free=True)),
    ("4  only acts A8 (+head)", dict(act=32, head=True, free=True)),
    ("4  only acts A8 (lin)", dict(act=32, free=True)),
    ("1b q8 + Q8_0 LoRA (A8)", dict(Q8, lora=True, free=True)),
    ("1c q8 + Q8_0 LoRA, f32 in", dict(Q8, lora="weights", free=True)),
    ("5  q4 engine", dict(lin="q4k", emb="q8", act=256, head=True, lora=True)),
    ("5' Q4_K linears only", dict(lin="q4k")),
    ("6  ideal 4-bit /32", dict(lin="i4")),
    ("6' ideal 4-bit /16", dict(lin="i4_16")),
    ("7  Q4_K_M-like mix", dict(lin=KM)),
    ("7' ideal4, qkv 6-bit", dict(lin=dict(KM, qkv_proj="i6", down_proj="i4"))),
    ("7\" ideal 6-bit /16 all", dict(lin="i6")),
    *[(f"8  ideal4 {k[:-5]} only", dict(lin={k: "i4"})) for k in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")],
]


class Harness:
    def __init__(self):
        native = os.path.join(TINY, "native")
        m = Phi4MultimodalForCausalLM.from_pretrained(native, dtype=torch.float32, attn_implementation="eager")
        for name in ("vision", "speech"):
            m.load_adapter(os.path.join(native, f"{name}-lora"), adapter_name=name)
        self.model = m.eval()
        self.linears = [(n, mod) for n, mod in m.named_modules() if LINEAR_RE.search(n)]
        assert len(self.linears) == 4 * mf.TEXT["num_hidden_layers"]
        self.emb = m.model.embed_tokens.weight
        assert m.lm_head.weight.data_ptr() == self.emb.data_ptr()
        self.lora = [getattr(mod, ab)[a].weight for _, mod in self.linears for ab in ("lora_A", "lora_B")
                     for a in ("vision", "speech")]
        self.saved = {id(p): p.detach().clone() for p in self._params()}
        with open(os.path.join(TINY, "reference", "cases.json")) as f:
            self.cases = json.load(f)["cases"]
        self.refs = {c["name"]: load_file(os.path.join(TINY, "reference", c["file"])) for c in self.cases}
        self.live = self.refs[self.cases[0]["name"]]["live_ids"]

    def _params(self):
        return [mod.base_layer.weight for _, mod in self.linears] + [self.emb] + self.lora

    @torch.no_grad()
    def apply(self, v):
        """Restores fp32 weights, then applies variant `v`; returns the pre-hook handles."""
        for p in self._params():
            p.copy_(self.saved[id(p)])
        lin = v.get("lin")
        for name, mod in self.linears:
            kind = LINEAR_RE.search(name).group(1)
            fmt = lin.get(kind) if isinstance(lin, dict) else lin
            if fmt:
                mod.base_layer.weight.copy_(quantize_weight(mod.base_layer.weight, fmt))
        if v.get("emb") == "q8":
            self.emb.copy_(q8_0(self.emb))
        hooks, g = [], torch.Generator().manual_seed(v.get("dither", 0))

        def hook(block):
            def fn(module, args):
                x = args[0]
                if v.get("dither"):
                    x = x + 1e-6 * x.abs().amax(-1, keepdim=True) * torch.randn(x.shape, generator=g)
                return (act8(x, block),) + tuple(args[1:])
            return fn
        if v.get("act"):
            hooks += [mod.base_layer.register_forward_pre_hook(hook(v["act"])) for _, mod in self.linears]
        if v.get("head"):
            hooks.append(self.model.lm_head.register_forward_pre_hook(hook(32)))
        if v.get("lora"):  # Q8_0 weights, A8 inputs (Q8_0 MatMul), as under the engine's q4
            for p in self.lora:
                p.copy_(q8_0(p))
            for _, mod in (self.linears if v["lora"] is True else []):
                for a in ("vision", "speech"):
                    hooks += [mod.lora_A[a].register_forward_pre_hook(hook(32)),
                              mod.lora_B[a].register_forward_pre_hook(hook(32))]
        return hooks

    def weight_rel_err(self):
        def rel(ps):
            num = sum(float(((p - self.saved[id(p)]) ** 2).sum()) for p in ps)
            return (num / sum(float((self.saved[id(p)] ** 2).sum()) for p in ps)) ** 0.5
        return rel([mod.base_layer.weight for _, mod in self.linears]), rel([self.emb])

    @torch.no_grad()
    def logits(self, ids):
        return self.model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=1).logits[0, -1]

    @torch.no_grad()
    def run_case(self, c, free):
        """Teacher-forced on ideal.greedy (== greedy except cross_speech k >= 6; ideal.* is what a fresh causal
        forward per step computes, generate's step.* differ only by ~6e-6 outside the cross cases' HF bug)."""
        mf.set_mode(self.model, c["lora"])
        ref = self.refs[c["name"]]
        want = ref["ideal.greedy"].tolist()
        ids, cos, agree, flips, rel = list(c["input_ids"]), [], 0, [], []
        for k in range(c["steps"]):
            lg = self.logits(ids)
            r = ref[f"ideal.step.{k}.logits"].double()
            x = lg[self.live].double()
            cos.append(float(x @ r / (x.norm() * r.norm())))
            rel.append(float((x - r).norm() / r.norm()))
            agree += int(lg.argmax()) == want[k]
            if int(lg.argmax()) != want[k]:
                top = r.topk(2).values
                flips.append(f"{c['name']}@{k}(ref margin {float(top[0] - top[1]):.3f})")
            ids.append(want[k])
        same = None
        if free:
            ids = list(c["input_ids"])
            for _ in range(c["steps"]):
                ids.append(int(self.logits(ids).argmax()))
            same = ids[len(c["input_ids"]):] == want
        return dict(cos=min(cos), agree=agree, steps=c["steps"], same=same, flips=flips, rel=rel)

    def run_variant(self, v):
        hooks = self.apply(v)
        res = self.weight_rel_err(), [self.run_case(c, v.get("free", False)) for c in self.cases]
        for hk in hooks:
            hk.remove()
        return res


@torch.no_grad()
def noise_sweep(h, part, levels, seeds=(1, 2, 3)):
    """Gaussian relative weight noise on `part` (decoder linears or live embedding rows): per level, the mean
    amplification (rel. RMS logit error / rel. RMS weight error), the worst min cosine and the mean number of
    cases whose greedy tokens all survive (teacher-forced == free-running, see the assert in main)."""
    rows = []
    for rel in levels:
        amp, cos, same = [], [], []
        for seed in seeds:
            h.apply({})
            g = torch.Generator().manual_seed(seed)
            for p in [mod.base_layer.weight for _, mod in h.linears] if part == "linears" else []:
                p.add_(rel * p.pow(2).mean().sqrt() * torch.randn(p.shape, generator=g))
            if part == "embedding":
                e = h.emb[h.live]
                h.emb[h.live] = e + rel * e.pow(2).mean().sqrt() * torch.randn(e.shape, generator=g)
            werr = h.weight_rel_err()[0 if part == "linears" else 1]
            res = [h.run_case(c, False) for c in h.cases]
            amp.append(float(np.sqrt(np.mean(np.square([x for r in res for x in r["rel"]])))) / werr)
            cos.append(min(r["cos"] for r in res))
            same.append(sum(r["agree"] == r["steps"] for r in res))
        rows.append((rel, float(np.mean(amp)), min(cos), float(np.mean(cos)), float(np.mean(same))))
    h.apply({})
    return rows


def main():
    h = Harness()
    names = [c["name"] for c in h.cases]
    print("cell = min cosine over steps / teacher-forced argmax agreement / free-running identical (Y/N, - = not run)")
    print("wLin, wEmb = relative RMS weight error of the decoder linears / embedding (live rows)\n")
    print(f"{'variant':24s} {'wLin%':>6s} {'wEmb%':>6s} " + " ".join(f"{n[:16]:>16s}" for n in names))
    summary = []
    for label, v in VARIANTS:
        (wl, we), res = h.run_variant(v)
        cells = [f"{r['cos']:.4f} {r['agree']:2d}/{r['steps']:<2d} {'-' if r['same'] is None else 'YN'[not r['same']]}"
                 for r in res]
        print(f"{label:24s} {100 * wl:6.2f} {100 * we:6.2f} " + " ".join(f"{c:>16s}" for c in cells))
        for r in res:
            if r["same"] is not None:
                assert r["same"] == (r["agree"] == r["steps"])  # greedy over fresh forwards: TF == free-running
        same = sum(r["agree"] == r["steps"] for r in res)
        lerr = float(np.sqrt(np.mean(np.square([x for r in res for x in r["rel"]]))))
        summary.append((label, lerr, min(r["cos"] for r in res), sum(r["agree"] for r in res),
                        sum(r["steps"] for r in res), same, [f for r in res for f in r["flips"]]))
    print("\nsummary: RMS relative logit error, min cosine, argmax agreement, cases with every step right")
    print("(== free-running identical), flipped steps with the reference top-2 margin")
    for label, lerr, mc, ag, st, same, flips in summary:
        print(f"{label:24s} lerr {100 * lerr:5.2f}%  min cos {mc:.4f}  agree {ag:2d}/{st}  identical {same}/7  "
              + " ".join(flips[:3]) + (" ..." if len(flips) > 3 else ""))
    print("\nGaussian weight noise (3 seeds): amplification = rel. RMS logit error / rel. RMS weight error;")
    print("bits = log2(1/e), the Shannon rate a Gaussian source needs for RMS error e*sigma")
    print(f"{'part':10s} {'e%':>5s} {'bits':>5s} {'amplif':>7s} {'worst cos':>9s} {'mean cos':>9s} {'identical':>9s}")
    levels = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05)
    for part in ("linears", "embedding"):
        for rel, amp, worst, mean, same in noise_sweep(h, part, levels):
            print(f"{part:10s} {100 * rel:5.2f} {np.log2(1 / rel):5.2f} {amp:7.2f} {worst:9.4f} {mean:9.4f} {same:7.1f}/7")


if __name__ == "__main__":
    main()
