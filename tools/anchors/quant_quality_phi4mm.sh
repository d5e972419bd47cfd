#!/usr/bin/env bash
# phi4mm's side of docs/quant-quality.md (not run in CI): scores every weight format and KV-cache
# type of `phi4mm perplexity` on the trained fixture's held-out text against the unquantized
# model (f32 compute on the stored bf16 weights, f32 KV cache), in every LoRA mode, and prints the
# markdown table of the doc. The KV-cache variants and bf16 are scored in LoRA mode none only;
# q8, q4 and q4m (with their default f16 KV cache) in all three modes.
#
# Usage: tools/anchors/quant_quality_phi4mm.sh WORK_DIR [PHI4MM] [FIXTURE_DIR]
#   WORK_DIR    where the reference files (~0.5 GB each) and the JSON results go (outside the repo)
#   PHI4MM      the phi4mm binary (default build/phi4mm)
#   FIXTURE_DIR the trained fixture (default tests/fixtures/trained)
# Environment: CTX (default 512), THREADS (default 2), CHUNKS (windows to score, default 0 = all).
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,13p' "$0"
  exit 2
fi
work=$1
phi4mm=${2:-build/phi4mm}
fixture=${3:-tests/fixtures/trained}
ctx=${CTX:-512}
threads=${THREADS:-2}
mkdir -p "$work"
text="$fixture/heldout.txt"
model="$fixture/orig"

score() {  # name mode extra-args...
  local name=$1 mode=$2
  shift 2
  "$phi4mm" perplexity -m "$model" -f "$text" --ctx "$ctx" --chunks "${CHUNKS:-0}" -t "$threads" --lora "$mode" --json \
    --kl-reference "$work/ref-$mode.kld" "$@" > "$work/$name-$mode.json"
}

for mode in none vision speech; do
  "$phi4mm" perplexity -m "$model" -f "$text" --ctx "$ctx" --chunks "${CHUNKS:-0}" -t "$threads" --lora "$mode" --json \
    --quant none --kv-dtype f32 --save-logits "$work/ref-$mode.kld" > "$work/f32-$mode.json"
done
score bf16 none --quant bf16 --kv-dtype f32
score none-kvf16 none --quant none --kv-dtype f16
score none-kvq8 none --quant none --kv-dtype q8
score q8-kvf32 none --quant q8 --kv-dtype f32
score q4-kvf32 none --quant q4 --kv-dtype f32
score q4m-kvf32 none --quant q4m --kv-dtype f32
for mode in none vision speech; do
  score q8 "$mode" --quant q8
  score q4 "$mode" --quant q4
  score q4m "$mode" --quant q4m
done

python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
def row(label, name, mode):
    r = json.load(open(os.path.join(work, f"{name}-{mode}.json")))
    if "mean_kld" not in r:
        return f"| {label} | {mode} | {r['kv_dtype']} | {r['ppl']:.3f} | – | – | – | {r['bits_per_weight']:.3f} |"
    return (f"| {label} | {mode} | {r['kv_dtype']} | {r['ppl']:.3f} | {r['mean_kld']:.6f} ± {r['mean_kld_error']:.6f} "
            f"| {r['p99_kld']:.6f} | {100 * r['same_top']:.2f} ± {100 * r['same_top_error']:.2f} % "
            f"| {r['bits_per_weight']:.3f} |")
print("| phi4mm | LoRA | KV | PPL | mean KLD | 99% KLD | same top | BPW |")
print("|---|---|---|---|---|---|---|---|")
for label, name, mode in [("f32 (reference)", "f32", "none"), ("bf16", "bf16", "none"), ("none", "none-kvf16", "none"),
                          ("none", "none-kvq8", "none"), ("q8", "q8-kvf32", "none"), ("q8", "q8", "none"),
                          ("q4", "q4-kvf32", "none"), ("q4", "q4", "none"),
                          ("q4m", "q4m-kvf32", "none"), ("q4m", "q4m", "none"),
                          ("f32 (reference)", "f32", "vision"), ("q8", "q8", "vision"), ("q4", "q4", "vision"),
                          ("q4m", "q4m", "vision"),
                          ("f32 (reference)", "f32", "speech"), ("q8", "q8", "speech"), ("q4", "q4", "speech"),
                          ("q4m", "q4m", "speech")]:
    print(row(label, name, mode))
EOF
