#!/usr/bin/env bash
# Installs the build dependencies, builds phi4mm (warnings are errors) and runs the whole test
# suite with CTest. This is the README's test command and what CI runs first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPHI4MM_WERROR=ON
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)"
