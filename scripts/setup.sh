#!/usr/bin/env bash
# Installs the Debian packages phi4mm builds against (compiler, CMake, and the libraries found
# with find_package/pkg-config). Safe to run repeatedly; needs root or sudo.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config
      libhwy-dev nlohmann-json3-dev libcli11-dev libpcre2-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libcpp-httplib-dev libboost-dev libstb-dev libsndfile1-dev libsoxr-dev libwebp-dev libjpeg62-turbo-dev
      libonnx-dev libprotobuf-dev
      clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
