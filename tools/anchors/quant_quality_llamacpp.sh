#!/usr/bin/env bash
# llama.cpp's side of docs/quant-quality.md (not run in CI): the trained decoder of
# tests/fixtures/trained, saved as a Hugging Face Phi-3 checkpoint by
# tools/reference/train_tiny_decoder.py --hf-out, is converted with llama.cpp's own
# convert_hf_to_gguf.py to an F32 GGUF, quantized with llama-quantize to Q8_0, Q4_0 and Q4_K_M
# (and Q4_K_M with its tied embedding / output at Q8_0, `--output-tensor-type q8_0`, the head
# precision of phi4mm's q4, which llama.cpp otherwise stores as Q6_K; and Q4_K-pure-q8out, every
# layer weight at Q4_K with that Q8_0 head, `--pure`: llama.cpp's format and quantizer without
# its per-tensor mixture, the like-for-like rival of phi4mm's q4), and each is scored with
# `llama-perplexity --kl-divergence` against the F32 file on the held-out
# text. phi4mm is then scored against the same F32 reference file: this checks that both tools
# tokenize the text to the same ids (phi4mm refuses a reference of other tokens) and that the two
# engines run the same model (phi4mm f32 vs llama.cpp F32: KL ~0).
#
# Usage: tools/anchors/quant_quality_llamacpp.sh LLAMA_SRC LLAMA_BUILD PYTHON HF_DIR WORK_DIR [PHI4MM]
#   LLAMA_SRC   llama.cpp sources (convert_hf_to_gguf.py, gguf-py); see tools/anchors/README.md
#   LLAMA_BUILD its build folder with bin/llama-quantize and bin/llama-perplexity
#   PYTHON      a python with torch, transformers, numpy, sentencepiece and mistral-common
#   HF_DIR      the Phi-3 checkpoint written by train_tiny_decoder.py --hf-out or, from the
#               committed fixture, by tools/reference/trained_fixture_to_hf.py
#   WORK_DIR    where the GGUFs, the ~4 GB reference file and the logs go (outside the repo)
#   PHI4MM      the phi4mm binary (default build/phi4mm)
# Environment: CTX (default 512), THREADS (default 2), NICE (default 0: llama-perplexity at nice 19
# on a busy 2-core machine took 25 minutes per file instead of 90 s), VARIANTS (a space-separated
# subset of the variants above, or other llama-quantize types such as Q5_K_M or Q6_K; default all).
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,25p' "$0"
  exit 2
fi
src=$1 build=$2 python=$3 hf=$4 work=$5
phi4mm=${6:-build/phi4mm}
ctx=${CTX:-512}
threads=${THREADS:-2}
niceness=${NICE:-0}
read -r -a variants <<< "${VARIANTS:-Q8_0 Q4_0 Q4_K_M Q4_K_M-q8out Q4_K-pure-q8out}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
text="$repo/tests/fixtures/trained/heldout.txt"
fixture="$repo/tests/fixtures/trained/orig"
mkdir -p "$work"

f32="$work/trained-F32.gguf"
if [ ! -f "$f32" ]; then
  nice -n 19 "$python" "$src/convert_hf_to_gguf.py" "$hf" --outtype f32 --outfile "$f32" > "$work/convert.log" 2>&1
fi
for q in "${variants[@]}"; do
  if [ ! -f "$work/trained-$q.gguf" ]; then
    extra=() type=$q
    case $q in
      Q4_K_M-q8out) extra=(--output-tensor-type q8_0) type=Q4_K_M ;;
      Q4_K-pure-q8out) extra=(--pure --output-tensor-type q8_0 --token-embedding-type q8_0) type=Q4_K ;;
    esac
    nice -n 19 "$build/bin/llama-quantize" "${extra[@]}" "$f32" "$work/trained-$q.gguf" "$type" "$threads" \
      > "$work/quantize-$q.log" 2>&1
  fi
done

base="$work/reference-F32.kld"
common=(-c "$ctx" -b "$ctx" -t "$threads")
nice -n "$niceness" "$build/bin/llama-perplexity" -m "$f32" -f "$text" "${common[@]}" --kl-divergence-base "$base" \
  > "$work/perplexity-F32.log" 2>&1
for q in "${variants[@]}"; do
  nice -n "$niceness" "$build/bin/llama-perplexity" -m "$work/trained-$q.gguf" "${common[@]}" --kl-divergence-base "$base" \
    --kl-divergence > "$work/perplexity-$q.log" 2>&1
done
# phi4mm against llama.cpp's F32 reference: same tokens, same model.
nice -n "$niceness" "$phi4mm" perplexity -m "$fixture" -f "$text" --ctx "$ctx" --kl-reference "$base" -t "$threads" \
  > "$work/phi4mm-vs-llama-F32.log" 2>&1

bpw() {  # bits per weight as llama.cpp reports it: "file size = ... (x BPW)" in the loader's log
  # (older llama.cpp) or "quant size = ... (x BPW)" in llama-quantize's (newer ones print it only there)
  grep -ho '([0-9.]* BPW)' "$@" 2>/dev/null | head -1 | tr -d '()' | cut -d' ' -f1
}
printf '| llama.cpp | PPL | mean KLD | 99%% KLD | same top | BPW |\n|---|---|---|---|---|---|\n'
printf '| F32 | %s | | | | %s |\n' "$(grep -o 'Final estimate: PPL = [0-9.]*' "$work/perplexity-F32.log" | awk '{print $NF}')" \
  "$(bpw "$work/perplexity-F32.log")"
for q in "${variants[@]}"; do
  l="$work/perplexity-$q.log"
  printf '| %s | %s | %s | %s | %s | %s |\n' "$q" \
    "$(grep -a -m1 '^Mean PPL(Q) ' "$l" | awk '{print $4}')" \
    "$(grep -a -m1 '^Mean    KLD' "$l" | awk '{print $3, $4, $5}')" \
    "$(grep -a -m1 '^99.0%   KLD' "$l" | awk '{print $3}')" \
    "$(grep -a -m1 '^Same top p' "$l" | awk '{print $4, $5, $6, $7}')" \
    "$(bpw "$l" "$work/quantize-$q.log")"
done
echo
echo "phi4mm (f32, $fixture) against llama.cpp's F32 reference:"
cat "$work/phi4mm-vs-llama-F32.log"
