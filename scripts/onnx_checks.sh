#!/usr/bin/env bash
# Exports the trained fixture (tests/fixtures/trained/orig: head_dim 64, which ORT's CPU
# GroupQueryAttention needs; the random tiny fixture's head_dim 8 does not run there) as the ONNX
# Runtime GenAI package with `phi4mm export`, in fp32, int4 and fp16 (If-gated LoRA, the default)
# and in fp32 with the gated-sum LoRA,
# then runs the packages with the pinned onnxruntime and onnxruntime-genai from PyPI
# (tools/onnx/requirements.txt, in a venv under build/):
#  * check_export.py: every part against the engine on the engine's own tensors, all LoRA modes
#    (fp32, and the fp32 package with --lora sum);
#  * check_genai.py: ORT GenAI end to end with its own processors picks the right LoRA in all four
#    modality mixes and equals the engine run on ORT GenAI's processor tensors (fp32; the int4 and
#    fp16 packages are run the same way and reported against the engine);
#  * check_precisions.py: the int4 weights equal onnxruntime's own quantizer bit for bit, the int4
#    graph equals the fp32 graph on the dequantized weights, and what int4 and fp16 cost is reported.
# Needs the build of scripts/test.sh (build/phi4mm with `export`). What CI runs after the C++
# tests; about four minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv-onnx
bash scripts/python_venv.sh "$venv" tools/onnx/requirements.txt
py="$venv/bin/python"
model=tests/fixtures/trained/orig
out=build/onnx-trained
rm -rf "$out"
./build/phi4mm export -m "$model" -o "$out/fp32"
./build/phi4mm export -m "$model" -o "$out/sum" --lora sum
./build/phi4mm export -m "$model" -o "$out/int4" --precision int4
./build/phi4mm export -m "$model" -o "$out/fp16" --precision fp16
echo "-- fp32 package: each part against the engine --"
"$py" tools/onnx/check_export.py --phi4mm build/phi4mm --model "$model" --package "$out/fp32"
echo "-- fp32 package with --lora sum: each part against the engine --"
"$py" tools/onnx/check_export.py --phi4mm build/phi4mm --model "$model" --package "$out/sum"
for p in fp32 int4 fp16; do
  echo "-- $p package: ORT GenAI end to end --"
  "$py" tools/onnx/check_genai.py --phi4mm build/phi4mm --model "$model" --package "$out/$p"
done
echo "-- int4 and fp16 packages: ORT's quantizer, the dequantized graph, their cost --"
"$py" tools/onnx/check_precisions.py --phi4mm build/phi4mm --model "$model" --fp32 "$out/fp32" --int4 "$out/int4" \
  --fp16 "$out/fp16"
rm -rf "$out"
