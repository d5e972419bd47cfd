#!/usr/bin/env bash
# Installs the build dependencies, builds phi4mm and runs it on the bundled tiny model (random
# weights, real tokenizer: the answer is gibberish, but every stage of the real pipeline runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target phi4mm_cli
./build/phi4mm run -m tests/fixtures/tiny/orig -p "${1:-What is the capital of France?}" -n 24 --verbose
