#!/usr/bin/env bash
# Installs what the portability checks need on a Debian x86-64 machine: QEMU user-mode emulation
# (qemu-x86_64 for an x86-64 CPU without AVX, qemu-aarch64 for 64-bit ARM), Debian's aarch64 cross
# compiler, and the arm64 builds of phi4mm's libraries side by side through multiarch (the ONNX
# exporter and Google Benchmark are left out of the cross build). Safe to run repeatedly; needs
# root or sudo. Used by .ci/run and cmake/aarch64-linux-gnu.cmake (see docs/portability.md).
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
pkgs=(qemu-user g++-aarch64-linux-gnu
      libpcre2-dev:arm64 libsndfile1-dev:arm64 libsoxr-dev:arm64 libwebp-dev:arm64
      libjpeg62-turbo-dev:arm64 libcpp-httplib-dev:arm64 libgtest-dev:arm64 libhwy-dev:arm64)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
