#!/usr/bin/env python3
"""Decode speed of a `phi4mm export` package under ONNX Runtime GenAI on the CPU, per LoRA mode.

For each mode the package is driven as an application would: a prompt (text for none; a 448x448 PNG for
vision; a WAV for speech) through og's own processor, then greedy decoding. The prompt's text is padded to about
--prompt-tokens tokens. Reported per mode: the prompt's time (processor excluded: encoders and prefill) and the
decode rate over --decode-tokens tokens (best of --rounds), with the decoder's intra-op threads set to --threads.
Compare with `phi4mm bench` on the same checkpoint (docs/onnx-export.md, "Full size").

Usage: bench_genai.py --package PKG [--threads 2] [--prompt-tokens 128] [--decode-tokens 32] [--rounds 2]
       [--modes none,vision,speech]
"""
import argparse
import json
import os
import time

import numpy as np
import onnxruntime_genai as og

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "fixtures")
MEDIA = {"none": ([], []), "vision": ([os.path.join(FIX, "images", "square_448.png")], []),
         "speech": ([], [os.path.join(FIX, "audio", "speech_16k_pcm16.wav")])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="none,vision,speech")
    args = ap.parse_args()
    cfg = og.Config(args.package)
    cfg.clear_providers()
    opts = {"intra_op_num_threads": args.threads, "inter_op_num_threads": 1}
    cfg.overlay(json.dumps({"model": {part: {"session_options": opts}
                                      for part in ("decoder", "embedding", "vision", "speech")}}))
    t0 = time.perf_counter()
    model = og.Model(cfg)
    print(f"{args.package}: loaded in {time.perf_counter() - t0:.1f} s, {args.threads} threads")
    proc = model.create_multimodal_processor()
    tok = og.Tokenizer(model)
    filler = "Tell me about the history of the city, its buildings, rivers and people. "
    for mode in args.modes.split(","):
        images, audios = MEDIA[mode]
        tags = "".join(f"<|image_{i + 1}|>" for i in range(len(images))) + \
            "".join(f"<|audio_{i + 1}|>" for i in range(len(audios)))
        words = filler * max(1, args.prompt_tokens // len(tok.encode(filler)))
        prompt = f"<|user|>{tags}{words}<|end|><|assistant|>"
        best_prompt, best_rate, n_ids = None, 0.0, 0
        for _ in range(args.rounds):
            inputs = proc(prompt, images=og.Images.open(*images) if images else None,
                          audios=og.Audios.open(*audios) if audios else None)
            n_ids = int(np.array(inputs["input_ids"].as_numpy()).shape[-1])
            params = og.GeneratorParams(model)
            params.set_search_options(do_sample=False, max_length=n_ids + args.decode_tokens + 8)
            gen = og.Generator(model, params)
            t0 = time.perf_counter()
            gen.set_inputs(inputs)
            gen.get_logits()
            t_prompt = time.perf_counter() - t0
            gen.generate_next_token()
            t0 = time.perf_counter()
            for _ in range(args.decode_tokens):
                gen.get_logits()
                gen.generate_next_token()
            rate = args.decode_tokens / (time.perf_counter() - t0)
            best_prompt = t_prompt if best_prompt is None else min(best_prompt, t_prompt)
            best_rate = max(best_rate, rate)
            del gen
        print(f"  {mode:6s}: prompt {n_ids} ids in {best_prompt:.2f} s (encoders + prefill), "
              f"decode {best_rate:.2f} tok/s (best of {args.rounds})")


if __name__ == "__main__":
    main()
