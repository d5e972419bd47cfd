#!/usr/bin/env bash
# Installs the Debian packages phi4mm builds against (compiler, CMake, and the libraries found
# with find_package/pkg-config). Safe to run repeatedly; needs root or sudo.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config curl ca-certificates
      libhwy-dev nlohmann-json3-dev libcli11-dev libpcre2-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libcpp-httplib-dev libboost-dev libstb-dev libsndfile1-dev libsoxr-dev libwebp-dev libjpeg62-turbo-dev
      libonnx-dev libprotobuf-dev
      clang libclang-rt-14-dev ccache)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# XGrammar's C++ core (the grammar engine behind structured output; Apache-2.0). Debian has no
# package, so its source package on PyPI is fetched at a pinned version, checked by hash, and built
# as a static library outside the repository (under PHI4MM_DEPS, default ~/.cache/phi4mm-deps;
# CMake looks there too). Its Python bindings are off, its warnings are routed to phi4mm
# (XGRAMMAR_LOG_CUSTOMIZE: the library never prints), LTO is off so gcc and clang trees both link it,
# and it is position-independent so the shared libphi4mm (what `cmake --install` lays out) can hold it.
xg_version=0.2.9
xg_sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
xg_url=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-${xg_version}.tar.gz
deps="${PHI4MM_DEPS:-${HOME}/.cache/phi4mm-deps}"
xg_prefix="$deps/xgrammar-$xg_version-pic"
if [ ! -f "$xg_prefix/lib/libxgrammar.a" ]; then
  mkdir -p "$deps"
  work="$(mktemp -d "$deps/xgrammar-build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  curl -fsSL --retry 3 -o "$work/xgrammar.tar.gz" "$xg_url"
  echo "$xg_sha256  $work/xgrammar.tar.gz" | sha256sum -c --quiet -
  tar -xzf "$work/xgrammar.tar.gz" -C "$work"
  mkdir -p "$work/build"
  printf 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n' > "$work/build/config.cmake"
  cmake -S "$work/xgrammar-$xg_version" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS=-fno-lto -DXGRAMMAR_LOG_CUSTOMIZE=1" -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DCMAKE_INSTALL_PREFIX="$xg_prefix" >/dev/null
  cmake --build "$work/build" -j "$(nproc)"
  cmake --install "$work/build" >/dev/null
  echo "XGrammar $xg_version installed in $xg_prefix"
fi
