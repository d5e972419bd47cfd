#!/usr/bin/env python3
"""Runs a package written by `phi4mm export` with onnxruntime and compares it with the engine.

For each case (a token-id prompt and a LoRA mode), the engine runs the ids with `phi4mm run --ids ... --lora MODE
--dump DIR` (greedy, logits of the prefill and of every decode step as .npy), and onnxruntime runs the package's
embedding model and decoder on the same ids: prefill, then one token per step fed back with the KV cache, the way
ONNX Runtime GenAI drives them. The decoder picks its LoRA from `input_ids` (200010 present -> vision, 200011 alone
-> speech, else none) and must keep it across the decode steps, so the mode is selected here by putting one
placeholder id into the decoder's `input_ids` at prefill only (the embeddings stay those of the real ids).

Printed per case: max |ort - engine| over the logits of every step, relative to max |engine logits|, whether the
greedy tokens agree, and how far the engine's logits in the other modes are (the test's power to fail).
CI runs it on the trained fixture through scripts/onnx_checks.sh (pinned versions: tools/onnx/requirements.txt).

Usage: check_export.py --phi4mm BUILD/phi4mm --model CKPT_DIR --package PKG_DIR [--steps 5] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

IMAGE_ID, AUDIO_ID = 200010, 200011


def engine_logits(phi4mm, model, ids, mode, steps, work):
    d = os.path.join(work, f"engine_{mode}_{len(ids)}")
    cmd = [phi4mm, "run", "-m", model, "--ids", ",".join(map(str, ids)), "--lora", mode, "-n", str(steps + 1),
           "--temperature", "0", "--dump", d]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"engine failed: {' '.join(cmd)}\n{r.stderr}")
    out = [np.load(os.path.join(d, "prefill.logits.npy"))]
    for k in range(1, steps + 1):
        p = os.path.join(d, f"step.{k}.logits.npy")
        if not os.path.exists(p):
            break
        out.append(np.load(p))
    gen = np.load(os.path.join(d, "generated_ids.npy")).tolist()
    return out, gen


class Package:
    """A package's embedding model and decoder on plain onnxruntime; `text` replaces the decoder file."""

    def __init__(self, pkg, text=None):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        self.emb = ort.InferenceSession(os.path.join(pkg, "phi-4-mm-embedding.onnx"), so, providers=["CPUExecutionProvider"])
        self.dec = ort.InferenceSession(text or os.path.join(pkg, "phi-4-mm-text.onnx"), so,
                                        providers=["CPUExecutionProvider"])
        cfg = json.load(open(os.path.join(pkg, "genai_config.json")))["model"]["decoder"]
        self.layers, self.kv, self.hd, self.hidden = (cfg["num_hidden_layers"], cfg["num_key_value_heads"],
                                                      cfg["head_size"], cfg["hidden_size"])
        self.dtype = np.float16 if "float16" in self.dec.get_inputs()[0].type else np.float32
        self.gated = any(i.name == "input_ids" for i in self.dec.get_inputs())

    def embed(self, ids):
        z = np.zeros((0, self.hidden), self.dtype)
        return self.emb.run(None, {"input_ids": np.array([ids], np.int64), "image_features": z, "audio_features": z})[0]

    def run(self, ids, markers, steps, follow):
        """Prefill + `steps` decode steps feeding the tokens `follow` (the engine's greedy tokens). `markers`
        replace the first ids of the decoder's input_ids at prefill only; the embeddings are the real ids'."""
        past = {}
        for l in range(self.layers):
            for kv in ("key", "value"):
                past[f"past_key_values.{l}.{kv}"] = np.zeros((1, self.kv, 0, self.hd), self.dtype)
        gate_ids = list(markers) + list(ids[len(markers):])
        cur, cur_gate, total, logits = list(ids), gate_ids, 0, []
        names = [o.name for o in self.dec.get_outputs()]
        for step in range(steps + 1):
            total += len(cur)
            feed = {"inputs_embeds": self.embed(cur), "attention_mask": np.ones((1, total), np.int64), **past}
            if self.gated:
                feed["input_ids"] = np.array([cur_gate], np.int64)
            outs = dict(zip(names, self.dec.run(None, feed)))
            logits.append(outs["logits"][0, -1].astype(np.float32))
            if step >= len(follow):
                break
            for l in range(self.layers):
                for kv in ("key", "value"):
                    past[f"past_key_values.{l}.{kv}"] = outs[f"present.{l}.{kv}"]
            cur = cur_gate = [follow[step]]
        return logits


def engine_media_run(phi4mm, model, images, audios, steps, work):
    """The engine on a media prompt with --dump: processor tensors, features, ids and logits."""
    d = os.path.join(work, "engine_media_" + "_".join(os.path.basename(i).split(".")[0] for i in images + audios))
    cmd = [phi4mm, "run", "-m", model, "-p", "Describe the media.", "-n", str(steps + 1), "--temperature", "0",
           "--dump", d]
    for i in images:
        cmd += ["--image", i]
    for a in audios:
        cmd += ["--audio", a]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"engine failed: {' '.join(cmd)}\n{r.stderr}")
    load = lambda n: np.load(os.path.join(d, n))
    imgs = [{k: load(f"image.{i}.{k}.npy") for k in ("pixel_values", "image_attention_mask", "image_sizes", "features")}
            for i in range(len(images))]
    auds = [{"audio_embeds": load(f"audio.{i}.audio_embeds.npy"), "audio_sizes": load(f"audio.{i}.audio_sizes.npy"),
             "features": load(f"audio.{i}.projection.npy")} for i in range(len(audios))]
    logits = [load("prefill.logits.npy")] + [load(f"step.{k}.logits.npy") for k in range(1, steps + 1)
                                              if os.path.exists(os.path.join(d, f"step.{k}.logits.npy"))]
    return imgs, auds, load("input_ids.npy").tolist(), load("generated_ids.npy").tolist(), logits


def speech_inputs(auds, with_image):
    """Batch the log-mel as ORT GenAI's phi4-audio-aligner does: zero-padded frames, a bool mask."""
    frames = max(a["audio_embeds"].shape[0] for a in auds)
    x = np.zeros((len(auds), frames, auds[0]["audio_embeds"].shape[1]), np.float32)
    mask = np.zeros((len(auds), frames), bool)
    for k, a in enumerate(auds):
        n = a["audio_embeds"].shape[0]
        x[k, :n] = a["audio_embeds"]
        mask[k, :n] = True
    sizes = np.array([int(round(float(a["audio_sizes"][0]))) for a in auds], np.int64)
    mode = 3 if with_image else 2
    return {"audio_embeds": x, "audio_attention_mask": mask, "audio_sizes": sizes,
            "audio_projection_mode": np.array([mode], np.int64)}


def vision_inputs(imgs):
    """Batch the processor tensors as ORT GenAI's phi4-vision-aligner does: pad crops, padded masks all 1."""
    crops = max(i["pixel_values"].shape[0] for i in imgs)
    pv = np.zeros((len(imgs), crops) + imgs[0]["pixel_values"].shape[1:], np.float32)
    mask = np.ones((len(imgs), crops) + imgs[0]["image_attention_mask"].shape[1:], np.float32)
    for k, i in enumerate(imgs):
        n = i["pixel_values"].shape[0]
        pv[k, :n] = i["pixel_values"]
        mask[k, :n] = i["image_attention_mask"]
    sizes = np.array([i["image_sizes"] for i in imgs], np.int64)
    return {"pixel_values": pv, "image_attention_mask": mask, "image_sizes": sizes}


def check_media(pkg, args, work, results):
    here = os.path.dirname(os.path.abspath(__file__))
    fx = os.path.join(os.path.dirname(os.path.dirname(here)), "tests", "fixtures")
    im = lambda f: os.path.join(fx, "images", f)
    au = lambda f: os.path.join(fx, "audio", f)
    sets = {"image 448": ([im("square_448.png")], []),
            "image 640x480": ([im("photo_640x480.png")], []),
            "audio 16k": ([], [au("speech_16k_pcm16.wav")]),
            "audio 45 s": ([], [au("long_45s_16k.flac")]),
            "image+audio": ([im("square_448.png")], [au("speech_16k_pcm16.wav")]),
            "2 images+audio": ([im("square_448.png"), im("wide_2000x100.png")], [au("speech_8k.wav")])}
    vis = ort.InferenceSession(os.path.join(args.package, "phi-4-mm-vision.onnx"), providers=["CPUExecutionProvider"])
    sph = ort.InferenceSession(os.path.join(args.package, "phi-4-mm-speech.onnx"), providers=["CPUExecutionProvider"])
    z = np.zeros((0, pkg.hidden), np.float32)
    for name, (images, audios) in sets.items():
        imgs, auds, ids, gen, eng_logits = engine_media_run(args.phi4mm, args.model, images, audios, args.steps, work)
        r = {"prompt": name, "tokens": len(ids), "mode": "auto"}
        vf = af = z
        if imgs:
            vf = vis.run(None, vision_inputs(imgs))[0]
            ref = np.concatenate([i["features"] for i in imgs], 0)
            r["image_tokens"] = int(ref.shape[0])
            r["image_features_rel_err"] = rel(vf, ref) if vf.shape == ref.shape else float("inf")
        if auds:
            # Every audio_projection_mode value of the family the engine used (speech projection for 0 and 2,
            # vision-speech for 1 and 3) must give the engine's features; the other family must not.
            feeds = speech_inputs(auds, bool(imgs))
            ref = np.concatenate([a["features"] for a in auds], 0)
            errs = []
            for mode in ((1, 3) if imgs else (0, 2)):
                feeds["audio_projection_mode"] = np.array([mode], np.int64)
                af = sph.run(None, feeds)[0]
                errs.append(rel(af, ref) if af.shape == ref.shape else float("inf"))
            feeds["audio_projection_mode"] = np.array([2 if imgs else 3], np.int64)
            r["audio_other_projection_diff"] = rel(sph.run(None, feeds)[0], ref)
            r["audio_tokens"] = int(ref.shape[0])
            r["audio_features_rel_err"] = max(errs)
        # The whole pipeline on plain onnxruntime: embedding with the ORT features, decoder gated by the real ids.
        past = {f"past_key_values.{l}.{kv}": np.zeros((1, pkg.kv, 0, pkg.hd), np.float32)
                for l in range(pkg.layers) for kv in ("key", "value")}
        names = [o.name for o in pkg.dec.get_outputs()]
        cur, total, logits = ids, 0, []
        for step in range(len(eng_logits)):
            emb = pkg.emb.run(None, {"input_ids": np.array([cur], np.int64), "image_features": vf if step == 0 else z,
                                     "audio_features": af if step == 0 else z})[0]
            total += len(cur)
            outs = dict(zip(names, pkg.dec.run(None, {"inputs_embeds": emb, "attention_mask": np.ones((1, total), np.int64),
                                                      "input_ids": np.array([cur], np.int64), **past})))
            logits.append(outs["logits"][0, -1])
            past = {k.replace("present", "past_key_values"): v for k, v in outs.items() if k.startswith("present")}
            if step < len(gen):
                cur = [gen[step]]
        r["steps"] = len(logits) - 1
        r["max_rel_err"] = max(rel(logits[k], eng_logits[k]) for k in range(len(eng_logits)))
        r["greedy_equal"] = [int(np.argmax(l)) for l in logits] == gen[:len(logits)]
        results.append(r)
        print(f"{name:15s} ({len(ids):4d} ids): "
              + (f"vision {r['image_tokens']} tokens {r['image_features_rel_err']:.2e}; " if imgs else "")
              + (f"speech {r['audio_tokens']} tokens {r['audio_features_rel_err']:.2e} (both mode values; the other "
                 f"projection differs by {r['audio_other_projection_diff']:.2e}); " if auds else "")
              + f"pipeline logits over {r['steps']} steps {r['max_rel_err']:.2e}, "
              + f"greedy {'equal' if r['greedy_equal'] else 'DIFFERENT'}")


def check_models(pkg):
    """onnx.checker.check_model(full_check=True) (with shape inference) on the four models of `pkg`."""
    for f in ("phi-4-mm-vision.onnx", "phi-4-mm-speech.onnx", "phi-4-mm-embedding.onnx", "phi-4-mm-text.onnx"):
        onnx.checker.check_model(os.path.join(pkg, f), full_check=True)
    print(f"onnx {onnx.__version__} checker (full_check) passes the four models of {pkg}")


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phi4mm", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--package", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    check_models(args.package)
    pkg = Package(args.package)
    rng = np.random.default_rng(0)
    prompts = {"short": rng.integers(100, 199000, 12).tolist(),   # below the LongRoPE switch (32 in tiny-gqa)
               "long": rng.integers(100, 199000, 40).tolist()}    # past it at prefill
    # (label, engine mode, placeholder ids put into the decoder's input_ids at prefill)
    cases = [("none", "none", []), ("vision", "vision", [IMAGE_ID]), ("speech", "speech", [AUDIO_ID]),
             ("vision (image+audio ids)", "vision", [AUDIO_ID, IMAGE_ID])]
    results = []
    with tempfile.TemporaryDirectory() as work:
        for pname, ids in prompts.items():
            ref = {m: engine_logits(args.phi4mm, args.model, ids, m, args.steps, work) for m in ("none", "vision", "speech")}
            for label, mode, markers in cases:
                eng, eng_tokens = ref[mode]
                logits = pkg.run(ids, markers, args.steps, eng_tokens)
                n = min(len(eng), len(logits))
                err = max(rel(logits[k], eng[k]) for k in range(n))
                greedy = [int(np.argmax(l)) for l in logits[:n]] == eng_tokens[:n]
                others = {m: max(rel(ref[m][0][k], eng[k]) for k in range(n)) for m in ref if m != mode}
                results.append({"prompt": pname, "tokens": len(ids), "mode": label, "steps": n - 1,
                                "max_rel_err": err, "greedy_equal": greedy, "other_modes_rel_diff": others})
                print(f"{pname:5s} ({len(ids):2d} ids) {label:24s} steps {n - 1}: max|ort-engine|/scale {err:.2e}, "
                      f"greedy {'equal' if greedy else 'DIFFERENT'}; engine other modes differ by "
                      + ", ".join(f"{m} {v:.2e}" for m, v in others.items()))
        check_media(pkg, args, work, results)
    if args.json:
        json.dump(results, open(args.json, "w"), indent=2)
    bad = [r for r in results if r["max_rel_err"] > 1e-4 or not r["greedy_equal"]
           or r.get("image_features_rel_err", 0) > 1e-4 or r.get("audio_features_rel_err", 0) > 1e-4
           or r.get("audio_other_projection_diff", 1) < 1e-2]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
