#!/usr/bin/env python3
"""Runs a package written by `phi4mm export` end to end with onnxruntime-genai and checks its LoRA choice.

For text, image, audio, image+audio and two images+audio prompts, ORT GenAI (its own processors, greedy) generates
a few tokens and its logits are taken at every step (`generator.get_logits()`), then a follow-up turn is appended
(`append_tokens`). Two references:
* the engine itself, run on ORT GenAI's own processor tensors and ids (`phi4mm run --ids ... --processor-tensors
  DIR --dump`, the LoRA mode chosen by the engine from the media): same greedy tokens, logits at every step and
  after the follow-up within 1e-4 of scale (fp32 packages; other precisions are reported against it);
* the same package driven step by step with plain onnxruntime on those tensors, with the decoder's LoRA gate
  seeing the real ids (the expected mode) or ids rewritten so that it picks each other mode (200010 -> 0 for none,
  200010 -> 200011 for speech, 200011 -> 200010 for vision): ORT GenAI must equal the expected mode and differ
  from the others, in the first turn and in the follow-up (so the check can fail).

CI runs it on the trained fixture through scripts/onnx_checks.sh (pinned versions: tools/onnx/requirements.txt).
Usage: check_genai.py --package PKG_DIR [--phi4mm BUILD/phi4mm --model CKPT_DIR] [--steps 6]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import onnxruntime_genai as og

IMAGE_ID, AUDIO_ID = 200010, 200011
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "fixtures")


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


class Pipeline:
    """The package on plain onnxruntime, driven as ORT GenAI drives it."""

    def __init__(self, pkg):
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        mk = lambda f: ort.InferenceSession(os.path.join(pkg, f), opts, providers=["CPUExecutionProvider"])
        self.vis, self.sph = mk("phi-4-mm-vision.onnx"), mk("phi-4-mm-speech.onnx")
        self.emb, self.dec = mk("phi-4-mm-embedding.onnx"), mk("phi-4-mm-text.onnx")
        self.names = [o.name for o in self.dec.get_outputs()]
        pk = [i for i in self.dec.get_inputs() if i.name == "past_key_values.0.key"][0]
        self.kv, self.hd = pk.shape[1], pk.shape[3]
        self.layers = sum(1 for i in self.dec.get_inputs() if i.name.endswith(".key"))
        self.hidden = self.emb.get_outputs()[0].shape[2]
        self.dtype = np.float16 if "float16" in self.dec.get_inputs()[0].type else np.float32
        # fp32 weights and I/O: the package must equal the engine; fp16 and int4 are reported against it.
        self.exact = self.dtype == np.float32 and not any(n.op_type == "MatMulNBits"
                                                          for n in onnx.load(os.path.join(pkg, "phi-4-mm-text.onnx"),
                                                                             load_external_data=False).graph.node)

    def features(self, t):
        z = np.zeros((0, self.hidden), self.dtype)
        vf = af = z
        if "pixel_values" in t:
            vf = self.vis.run(None, {k: t[k] for k in ("pixel_values", "image_attention_mask", "image_sizes")})[0]
        if "audio_embeds" in t:
            af = self.sph.run(None, {k: t[k] for k in ("audio_embeds", "audio_attention_mask", "audio_sizes",
                                                      "audio_projection_mode")})[0]
        return vf, af

    def run(self, ids, vf, af, tokens, gate_map=None, follow=None):
        """Logits after the prompt and after each of `tokens[:-1]`, fed one at a time as ORT GenAI feeds them; with
        `follow`, then the last token and the follow-up ids in one chunk (get_logits, then append_tokens) and the
        logits after them. `gate_map` rewrites the decoder's input_ids. The chunking is ORT GenAI's own: a prefill
        of several tokens rounds differently from single-token steps in fp16, so another chunking is not the same
        computation."""
        z = np.zeros((0, self.hidden), self.dtype)
        past = {f"past_key_values.{l}.{kv}": np.zeros((1, self.kv, 0, self.hd), self.dtype)
                for l in range(self.layers) for kv in ("key", "value")}
        chunks = [list(ids)] + [[t] for t in tokens[:-1]]
        if follow is not None:
            chunks += [[tokens[-1]], list(follow)]
        out, total = [], 0
        for step, cur in enumerate(chunks):
            e = self.emb.run(None, {"input_ids": np.array([cur], np.int64), "image_features": vf if step == 0 else z,
                                    "audio_features": af if step == 0 else z})[0]
            gids = [gate_map.get(i, i) for i in cur] if gate_map else cur
            total += len(cur)
            o = dict(zip(self.names, self.dec.run(None, {"inputs_embeds": e, "attention_mask": np.ones((1, total), np.int64),
                                                         "input_ids": np.array([gids], np.int64), **past})))
            out.append(o["logits"][0, -1].astype(np.float32))
            past = {k.replace("present", "past_key_values"): v for k, v in o.items() if k.startswith("present")}
        if follow is not None:
            del out[-2]  # the last token's own logits: ORT GenAI computes them but the check never reads them
        return out


def og_generate(model, proc, prompt, images, audios, steps, follow_up):
    inputs = proc(prompt, images=og.Images.open(*images) if images else None,
                  audios=og.Audios.open(*audios) if audios else None)
    tensors = {k: inputs[k].as_numpy() for k in inputs.keys()}
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, top_k=1, max_length=4096)
    gen = og.Generator(model, params)
    gen.set_inputs(inputs)
    logits, tokens = [], []
    for _ in range(steps):
        # get_logits() runs the model on the pending input (the prompt, then the last sampled token) when it has
        # not run yet, so it is read before generate_next_token samples from the same logits.
        logits.append(np.array(gen.get_logits())[0, -1].astype(np.float32))
        gen.generate_next_token()
        tokens.append(int(gen.get_next_tokens()[0]))
    gen.get_logits()  # feeds the last sampled token, so that the follow-up continues after it
    gen.append_tokens(np.array(follow_up, np.int32))
    logits.append(np.array(gen.get_logits())[0, -1].astype(np.float32))
    return tensors, logits, tokens


def engine_run(phi4mm, model, ids, tensors, steps, work):
    """The engine on ORT GenAI's ids and processor tensors: logits after the prompt and each of `steps - 1` greedy
    tokens, and those tokens."""
    d = tempfile.mkdtemp(dir=work)
    for name in ("pixel_values", "image_attention_mask", "image_sizes", "audio_embeds", "audio_attention_mask",
                 "audio_sizes"):
        if name in tensors:
            a = tensors[name]
            a = a.astype(np.float32) if a.dtype.kind == "f" else a.astype(np.int64)
            np.save(os.path.join(d, name + ".npy"), a)
    dump = os.path.join(d, "dump")
    cmd = [phi4mm, "run", "-m", model, "--ids", ",".join(map(str, ids)), "--processor-tensors", d,
           "-n", str(max(steps, 1)), "--temperature", "0", "--dump", dump]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"engine failed: {' '.join(cmd[:6])} ...\n{r.stderr}")
    logits = [np.load(os.path.join(dump, "prefill.logits.npy"))] + \
             [np.load(os.path.join(dump, f"step.{k}.logits.npy")) for k in range(1, steps)]
    return logits, np.load(os.path.join(dump, "generated_ids.npy")).tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", required=True)
    ap.add_argument("--phi4mm")
    ap.add_argument("--model")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    cfg = og.Config(args.package)
    cfg.clear_providers()
    model = og.Model(cfg)
    proc = model.create_multimodal_processor()
    tok = og.Tokenizer(model)
    pipe = Pipeline(args.package)
    im = lambda f: os.path.join(FIX, "images", f)
    au = lambda f: os.path.join(FIX, "audio", f)
    follow = tok.encode("<|end|><|user|>Say it again.<|end|><|assistant|>").tolist()
    cases = [("text", [], [], "none"), ("image", [im("square_448.png")], [], "vision"),
             ("audio", [], [au("speech_16k_pcm16.wav")], "speech"),
             ("image+audio", [im("square_448.png")], [au("speech_16k_pcm16.wav")], "vision"),
             ("2 images+audio", [im("square_448.png"), im("photo_640x480.png")], [au("speech_8k.wav")], "vision")]
    # Decoder-id rewrites that force each mode on the same prompt.
    force = {"none": {IMAGE_ID: 0, AUDIO_ID: 0}, "vision": {AUDIO_ID: IMAGE_ID}, "speech": {IMAGE_ID: AUDIO_ID}}
    failed = False
    for name, images, audios, expected in cases:
        placeholders = "".join(f"<|image_{i + 1}|>" for i in range(len(images))) + \
            "".join(f"<|audio_{i + 1}|>" for i in range(len(audios)))
        prompt = f"<|user|>{placeholders}Describe.<|end|><|assistant|>"
        t, og_logits, og_tokens = og_generate(model, proc, prompt, images, audios, args.steps, follow)
        ids = t["input_ids"][0].astype(np.int64).tolist()
        vf, af = pipe.features(t)
        # Each mode's logits at every step, then after the follow-up (the last entry).
        ref = {mode: pipe.run(ids, vf, af, og_tokens, None if mode == expected else gmap, follow)
               for mode, gmap in force.items()}
        err = max(rel(og_logits[k], ref[expected][k]) for k in range(args.steps))
        err_follow = rel(og_logits[-1], ref[expected][-1])
        # A text prompt has no placeholder to rewrite: its other modes are covered by check_export.py.
        others = {m: min(max(rel(og_logits[k], ref[m][k]) for k in range(args.steps)), rel(og_logits[-1], ref[m][-1]))
                  for m in force if m != expected and name != "text"}
        greedy = [int(np.argmax(l)) for l in ref[expected][:args.steps]] == og_tokens
        line = (f"{name:15s} ({len(ids):4d} ids) expected {expected:6s}: ORT GenAI vs pipeline {err:.2e} over "
                f"{args.steps} steps, follow-up {err_follow:.2e}, greedy {'equal' if greedy else 'DIFFERENT'}"
                + "".join(f", vs {m} {v:.2e}" for m, v in others.items()))
        if args.phi4mm:
            with tempfile.TemporaryDirectory() as work:
                eng, eng_tokens = engine_run(args.phi4mm, args.model, ids, t, args.steps, work)
                eng_follow, _ = engine_run(args.phi4mm, args.model, ids + og_tokens + follow, t, 1, work)
            e_err = max(rel(og_logits[k], eng[k]) for k in range(args.steps))
            e_follow = rel(og_logits[-1], eng_follow[0])
            same = eng_tokens[:args.steps] == og_tokens
            line += (f"; vs engine on these tensors {e_err:.2e}, follow-up {e_follow:.2e}, "
                     f"tokens {'equal' if same else 'DIFFERENT'}")
            if pipe.exact:
                failed |= bool(max(e_err, e_follow) > 1e-4 or not same)
            else:
                line += " (reported: not an fp32 package)"
        print(line)
        failed |= bool(err > 1e-4 or err_follow > 1e-4 or not greedy or (others and min(others.values()) < 1e-2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
