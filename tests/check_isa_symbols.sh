#!/usr/bin/env bash
# Build-output check (ctest IsaObjectsShareNoWeakSymbols): no function compiled with extended-ISA
# flags is reachable from code of another ISA. Inline functions and template instantiations are
# emitted as weak (COMDAT) symbols in every object that uses them, and the linker keeps any one
# copy: if an AVX2 object and a baseline object both carry std::foo<float> or an inline helper, the
# baseline caller may end up in the AVX2 copy and crash on a CPU without AVX2. So every weak symbol
# an ISA object (kernels/*_avx2.cc, *_avxvnni.cc, *_avx512.cc, *_neondot.cc) defines must appear (defined or
# used) in no object of another ISA group. Fix a finding by giving the helper internal linkage
# (anonymous namespace / static) or by keeping the template out of the ISA file.
# DW.ref.* are the exception-personality pointers (data, the same bytes in every object), not code.
# Usage: check_isa_symbols.sh NM OBJECT_LIST_FILE...   (each file lists object paths, one a line)
#        check_isa_symbols.sh --self-test NM CXX       (the check must catch a planted shared inline)
set -euo pipefail
if [ "${1:-}" = --self-test ]; then
  nm_tool=$2 cxx=$3
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  printf 'inline __attribute__((noinline)) int Shared(int x) { return x * 3; }\n' > "$dir/shared.h"
  printf '#include "shared.h"\nint Kernel(int x) { return Shared(x) + 1; }\n' > "$dir/k_avx2.cc"
  printf '#include "shared.h"\nint Base(int x) { return Shared(x) + 2; }\n' > "$dir/base.cc"
  printf 'static inline __attribute__((noinline)) int Own(int x) { return x * 5; }\nint Kernel2(int x) { return Own(x); }\n' > "$dir/ok_avx2.cc"
  "$cxx" -O2 -c "$dir/k_avx2.cc" -o "$dir/k_avx2.cc.o"
  "$cxx" -O2 -c "$dir/base.cc" -o "$dir/base.cc.o"
  "$cxx" -O2 -c "$dir/ok_avx2.cc" -o "$dir/ok_avx2.cc.o"
  printf '%s\n' "$dir/ok_avx2.cc.o" "$dir/base.cc.o" > "$dir/good.txt"
  printf '%s\n' "$dir/k_avx2.cc.o" "$dir/base.cc.o" > "$dir/bad.txt"
  bash "$0" "$nm_tool" "$dir/good.txt" || { echo "self-test: a clean pair was flagged"; exit 1; }
  if out=$(bash "$0" "$nm_tool" "$dir/bad.txt"); then echo "self-test: the shared inline was not caught"; exit 1; fi
  echo "$out" | grep -q "Shared(int)" || { echo "self-test: the finding does not name Shared(int): $out"; exit 1; }
  echo "self-test: a shared inline is caught, an internal one is not: ok"
  exit 0
fi
nm_tool=$1
shift
objects=$(cat "$@" | sed '/^$/d' | sort -u)
[ -n "$objects" ] || { echo "no objects listed"; exit 1; }

group_of() {
  case "$1" in
    *_avx2.cc.o) echo avx2 ;;
    *_avxvnni.cc.o) echo avxvnni ;;
    *_avx512.cc.o) echo avx512 ;;
    *_neondot.cc.o) echo neondot ;;
    *) echo base ;;
  esac
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
isa_objects=0
# One line per (group, symbol, kind): kind W = weak definition, U = use (undefined reference).
while IFS= read -r obj; do
  g=$(group_of "$obj")
  [ "$g" = base ] || isa_objects=$((isa_objects + 1))
  "$nm_tool" -P "$obj" | awk -v g="$g" '
    $1 ~ /^DW\.ref\./ { next }
    $2 == "W" || $2 == "V" || $2 == "u" { print g, $1, "W" }
    $2 == "U" || $2 == "w" || $2 == "v" { print g, $1, "U" }' >> "$tmp/all"
done <<< "$objects"
sort -u "$tmp/all" -o "$tmp/all"

# Weak symbols defined by an ISA group, then every (group, symbol) pair of another group.
awk '$1 != "base" && $3 == "W" { print $1, $2 }' "$tmp/all" | sort -u > "$tmp/isa_weak"
bad=$(awk 'NR == FNR { owner[$2] = owner[$2] " " $1; next }
           ($2 in owner) && index(owner[$2] " ", " " $1 " ") == 0 { print $2 " (weak in" owner[$2] ", also in " $1 ")" }' \
         "$tmp/isa_weak" "$tmp/all" | sort -u)
n_weak=$(wc -l < "$tmp/isa_weak")
if [ -n "$bad" ]; then
  echo "weak symbols of ISA objects shared with other ISA groups (the linker may hand another group this copy):"
  echo "$bad" | while IFS= read -r line; do
    sym=${line%% *}
    echo "  $(echo "$sym" | c++filt) -- ${line#* }"
  done
  exit 1
fi
echo "$isa_objects ISA objects, $n_weak weak symbols defined in them, none shared with another ISA group: ok"
