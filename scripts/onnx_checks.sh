#!/usr/bin/env bash
# Exports the trained fixture (tests/fixtures/trained/orig: head_dim 64, which ORT's CPU
# GroupQueryAttention needs; the random tiny fixture's head_dim 8 does not run there) as the ONNX
# Runtime GenAI package with `phi4mm export`, then runs it with the pinned onnxruntime and
# onnxruntime-genai from PyPI (tools/onnx/requirements.txt, in a venv under build/):
# check_export.py (every part against the engine on the engine's own tensors, all LoRA modes) and
# check_genai.py (ORT GenAI end to end with its own processors picks the right LoRA in all four
# modality mixes). Needs the build of scripts/test.sh (build/phi4mm with `export`). What CI runs
# after the C++ tests; about two minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv-onnx
bash scripts/python_venv.sh "$venv" tools/onnx/requirements.txt
model=tests/fixtures/trained/orig
pkg=build/onnx-trained
rm -rf "$pkg"
./build/phi4mm export -m "$model" -o "$pkg"
"$venv/bin/python" tools/onnx/check_export.py --phi4mm build/phi4mm --model "$model" --package "$pkg"
"$venv/bin/python" tools/onnx/check_genai.py --phi4mm build/phi4mm --model "$model" --package "$pkg"
rm -rf "$pkg"
