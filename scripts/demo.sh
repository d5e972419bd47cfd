#!/usr/bin/env bash
# Installs the build dependencies, builds phi4mm and runs it on the bundled trained tiny model
# (tests/fixtures/trained: a 4-layer decoder with Phi-4-mini's architecture and the real tokenizer,
# trained for a few minutes on Python's documentation: it answers in recognisable words about
# Python, not sensibly; real answers need the real checkpoint, see README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target phi4mm_cli
./build/phi4mm run -m tests/fixtures/trained/orig -p "${1:-Tell me about Lists.}" -n 60 \
  --temperature 0.8 --top-p 0.9 --repeat-penalty 1.3 --seed 1 --verbose
