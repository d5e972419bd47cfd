#!/usr/bin/env bash
# The installable library (cmake/install.cmake), as a user meets it: `cmake --install build` into a
# temporary prefix, then the C and the C++ consumer projects (tests/consumers/) built against that
# tree through find_package(phi4mm), and the C one again through pkg-config alone, each run on the
# tiny fixture: the C program must tokenize "hello world" to the known ids and answer, the C++ one
# must give the same answer from Chat and from the engine, and all three answers must agree.
# Needs build/ (scripts/test.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== the installed library: cmake --install, find_package(phi4mm) and pkg-config consumers =="
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
cmake --install build --prefix "$prefix" > "$tmp/install.log"
fixture="$PWD/tests/fixtures/tiny/orig"
for lang in c cpp; do
  cmake -S "tests/consumers/$lang" -B "$tmp/$lang" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
  cmake --build "$tmp/$lang" > /dev/null
done
# The consumers find libphi4mm.so through the install tree's rpath-less layout: as a user would
# without installing to a system directory, through LD_LIBRARY_PATH.
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$tmp/c/consumer_c" "$fixture" > "$tmp/c.txt"
"$tmp/cpp/consumer_cpp" "$fixture" > "$tmp/cpp.txt"
grep -q "^bad folder: .*/nonexistent/phi4mm-model" "$tmp/c.txt" || { echo "FAILED: no error for a bad folder"; cat "$tmp/c.txt"; exit 1; }
grep -qx "ids: 24912 2375" "$tmp/c.txt" || { echo "FAILED: the C consumer's ids"; cat "$tmp/c.txt"; exit 1; }
# pkg-config alone: a plain cc command line.
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --exists phi4mm
cc -std=c11 -Wall -Wextra -Werror tests/consumers/c/main.c -o "$tmp/consumer_c_pc" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs phi4mm)
"$tmp/consumer_c_pc" "$fixture" > "$tmp/c_pc.txt"
cmp "$tmp/c.txt" "$tmp/c_pc.txt" || { echo "FAILED: the pkg-config build answers differently"; exit 1; }
c_answer=$(grep "^answer: " "$tmp/c.txt")
grep -qxF "$c_answer" "$tmp/cpp.txt" || { echo "FAILED: C and C++ answers differ"; cat "$tmp/c.txt" "$tmp/cpp.txt"; exit 1; }
echo "installed: $(cd "$prefix" && find . -name 'libphi4mm.so*' | sort | tr '\n' ' ')$(find "$prefix/include/phi4mm" -name '*.h' | wc -l) headers"
cat "$tmp/c.txt" "$tmp/cpp.txt"
echo "install checks: ok"
