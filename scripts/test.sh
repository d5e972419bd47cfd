#!/usr/bin/env bash
# Installs the build dependencies, builds phi4mm (warnings are errors) and runs the whole test
# suite with CTest. This is the README's test command and what CI runs first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release  # CMakePresets.json: build/, Ninja, Release, -Werror
cmake --build --preset release -j "$(nproc)"
ctest --preset release -j "$(nproc)"
