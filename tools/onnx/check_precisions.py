#!/usr/bin/env python3
"""Checks the fp16 and int4 packages written by `phi4mm export` against ORT's own quantizer, the fp32 package and
the engine.

* onnx.checker (full_check) on every model of both packages.
* int4, bit for bit: every MatMulNBits of the int4 decoder (4-bit linears, 8-bit lm_head and LoRA A/B) holds
  exactly the bytes and scales that onnxruntime's own quantizer (quantize_matmul_4bits / quantize_matmul_8bits, the
  block-32 symmetric RTN that the ORT GenAI model builder uses) makes from the fp32 package's weight.
* int4, the graph: with accuracy_level 0 (float activations) the int4 decoder equals the fp32 decoder whose
  weights are replaced by the int4 weights dequantized, within 1e-4 of scale, in every LoRA mode: the quantized
  graph computes what the fp32 one does, on the weights it holds.
* Reported (the cost of the precision, on the trained fixture's real weights): the int4 decoder as shipped
  (accuracy_level 4 on cpu: int8 activations) and the fp16 decoder against the engine's fp32 logits, teacher-forced
  along the engine's greedy tokens: largest logit difference relative to scale, and how often the top token agrees.

Usage: check_precisions.py --phi4mm BUILD/phi4mm --model CKPT --fp32 PKG --int4 PKG [--fp16 PKG] [--steps 8]
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_export import IMAGE_ID, AUDIO_ID, Package, check_models, engine_logits, rel  # noqa: E402


def nbits_nodes(model):
    for n in model.graph.node:
        if n.op_type == "MatMulNBits":
            yield n, {a.name: a.i for a in n.attribute}
        for a in n.attribute:  # If branches (--lora if)
            if a.type == onnx.AttributeProto.GRAPH:
                for m in a.g.node:
                    if m.op_type == "MatMulNBits":
                        yield m, {b.name: b.i for b in m.attribute}


def check_bits(fp32_text, int4_text):
    """Our packed bytes and scales against ORT's quantizer on the fp32 weights; returns (nodes, mismatches)."""
    w32 = {t.name: t for t in fp32_text.graph.initializer}
    w4 = {t.name: t for t in int4_text.graph.initializer}
    count, bad = 0, []
    for node, at in nbits_nodes(int4_text):
        bname, sname = node.input[1], node.input[2]
        bits, K, N, bs = at["bits"], at["K"], at["N"], at["block_size"]
        base = bname.rsplit("_Q", 1)[0]
        w = numpy_helper.to_array(w32[base + "_T"]).astype(np.float32)  # [K, N]
        kb = (K + bs - 1) // bs
        packed = np.zeros((N, kb, bs * bits // 8), np.uint8)
        scales = np.zeros((N, kb), np.float32)
        zp = np.zeros((N, (kb * bits + 7) // 8), np.uint8)
        (quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits)(packed, w, scales, zp, bs, N, K, True)
        ours_b = numpy_helper.to_array(w4[bname])
        ours_s = numpy_helper.to_array(w4[sname]).astype(np.float32).reshape(N, kb)
        if not (np.array_equal(ours_b, packed) and np.array_equal(ours_s.view(np.uint32), scales.view(np.uint32))):
            bad.append(f"{bname}: {int(np.sum(ours_b != packed))} bytes and "
                       f"{int(np.sum(ours_s.view(np.uint32) != scales.view(np.uint32)))} scales differ")
        count += 1
    return count, bad


def dequantized_reference(fp32_text, int4_text, work):
    """(fp32 decoder with the int4 weights dequantized, int4 decoder at accuracy_level 0), saved under `work`."""
    w4 = {t.name: t for t in int4_text.graph.initializer}
    deq = {}
    for node, at in nbits_nodes(int4_text):
        bits, K, N, bs = at["bits"], at["K"], at["N"], at["block_size"]
        kb = (K + bs - 1) // bs
        b = numpy_helper.to_array(w4[node.input[1]]).reshape(N, kb, -1)
        if bits == 4:
            q = np.stack([b & 0xF, b >> 4], axis=-1).reshape(N, kb * bs)
        else:
            q = b.reshape(N, kb * bs)
        s = numpy_helper.to_array(w4[node.input[2]]).astype(np.float32).reshape(N, kb)
        w = (q.astype(np.float32) - (1 << (bits - 1))).reshape(N, kb, bs) * s[:, :, None]
        deq[node.input[1].rsplit("_Q", 1)[0] + "_T"] = np.ascontiguousarray(w.reshape(N, kb * bs)[:, :K].T)
        for a in node.attribute:
            if a.name == "accuracy_level":
                a.i = 0
    for t in fp32_text.graph.initializer:
        if t.name in deq:
            t.CopyFrom(numpy_helper.from_array(deq[t.name].astype(np.float32), t.name))
    paths = []
    for m, name in ((fp32_text, "fp32_dequantized.onnx"), (int4_text, "int4_acc0.onnx")):
        p = os.path.join(work, name)
        onnx.save(m, p, save_as_external_data=True, all_tensors_to_one_file=True, location=name + ".data")
        paths.append(p)
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phi4mm", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--fp32", required=True)
    ap.add_argument("--int4", required=True)
    ap.add_argument("--fp16")
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    failed = False
    for pkg in (args.int4, args.fp16):
        if pkg:
            check_models(pkg)
    text = "phi-4-mm-text.onnx"
    fp32_text = onnx.load(os.path.join(args.fp32, text))
    int4_text = onnx.load(os.path.join(args.int4, text))
    count, bad = check_bits(fp32_text, int4_text)
    print(f"int4 MatMulNBits weights equal to onnxruntime's quantizer: {count - len(bad)} of {count}")
    for b in bad:
        print("  " + b)
    failed |= bool(bad) or count == 0

    rng = np.random.default_rng(0)
    prompts = {"short": rng.integers(100, 199000, 12).tolist(), "long": rng.integers(100, 199000, 40).tolist()}
    cases = [("none", []), ("vision", [IMAGE_ID]), ("speech", [AUDIO_ID])]
    with tempfile.TemporaryDirectory() as work:
        ref_path, acc0_path = dequantized_reference(fp32_text, int4_text, work)
        del fp32_text, int4_text
        ref, acc0 = Package(args.fp32, ref_path), Package(args.int4, acc0_path)
        shipped = {"int4": Package(args.int4)}
        if args.fp16:
            shipped["fp16"] = Package(args.fp16)
        worst, agree = {k: 0.0 for k in shipped}, {k: [0, 0] for k in shipped}
        for pname, ids in prompts.items():
            for mode, markers in cases:
                eng, tokens = engine_logits(args.phi4mm, args.model, ids, mode, args.steps, work)
                a = acc0.run(ids, markers, args.steps, tokens)
                r = ref.run(ids, markers, args.steps, tokens)
                err = max(rel(x, y) for x, y in zip(a, r))
                print(f"{pname:5s} {mode:6s}: int4 (accuracy_level 0) vs fp32 with its dequantized weights {err:.2e}")
                failed |= err > 1e-4
                for k, pkg in shipped.items():
                    got = pkg.run(ids, markers, args.steps, tokens)
                    n = min(len(got), len(eng))
                    worst[k] = max(worst[k], max(rel(got[i], eng[i]) for i in range(n)))
                    agree[k][0] += sum(int(np.argmax(got[i]) == np.argmax(eng[i])) for i in range(n))
                    agree[k][1] += n
        for k in shipped:
            print(f"{k} package (as shipped) vs engine fp32, teacher-forced: largest logit difference "
                  f"{worst[k]:.2e} of scale, top token equal at {agree[k][0]} of {agree[k][1]} steps")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
