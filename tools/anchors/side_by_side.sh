#!/usr/bin/env bash
# phi4mm bench beside llama-bench on the same full-size shapes and the same machine (issue 14's
# prefill and decode comparison; docs/benchmarks.md "Side by side with llama.cpp"). Alternates the
# two tools for ROUNDS rounds, q4 against Q4_0 and q8 against Q8_0, and prints both tools' output.
#
# Usage: tools/anchors/side_by_side.sh LLAMA_BIN PHI4MM_Q4_DIR PHI4MM_Q8_DIR GGUF_Q4_0 GGUF_Q8_0 [PHI4MM]
#   LLAMA_BIN      llama.cpp's bin folder (llama-bench); tools/anchors/README.md builds it
#   PHI4MM_Q*_DIR  folders `phi4mm quantize --quant q4|q8` wrote from tools/fullsize/make_full_checkpoint.py's checkpoint
#   GGUF_Q*        llama-quantize's Q4_0 / Q8_0 of make_phi4mini_gguf.py's F16 file
#   PHI4MM         the phi4mm binary (default build/phi4mm)
# Environment: THREADS (default 2), ROUNDS (default 2), PROMPT (default 128), DECODE (default 32),
# PHI4MM_ISA (e.g. avx2, to time that table on a CPU that has a wider one).
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,14p' "$0"
  exit 2
fi
bin=$1 q4=$2 q8=$3 g4=$4 g8=$5
phi4mm=${6:-build/phi4mm}
threads=${THREADS:-2}
prompt=${PROMPT:-128}
decode=${DECODE:-32}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for pair in "q4 $q4 Q4_0 $g4" "q8 $q8 Q8_0 $g8"; do
    read -r name dir gname gguf <<< "$pair"
    echo "=== round $round: phi4mm $name ($(date -u +%H:%M:%S))"
    "$phi4mm" bench -m "$dir" -t "$threads" --prompt-tokens "$prompt" --decode-tokens "$decode" --lora none \
      --vision-crops 0 --audio-seconds 0
    echo "=== round $round: llama.cpp $gname ($(date -u +%H:%M:%S))"
    "$bin/llama-bench" -m "$gguf" -p "$prompt" -n "$decode" -t "$threads" -r 3 2>&1 | grep '^|'
  done
done
