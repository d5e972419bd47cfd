#!/usr/bin/env bash
# Fuzz smoke test for CI: builds every libFuzzer target (fuzz/*_fuzz.cc) with clang, ASan and UBSan
# into build-fuzz/ (or $PHI4MM_FUZZ_BUILD), then runs each for N seconds (first argument, default 30) on a temporary copy of
# its seed corpus fuzz/corpus/<name>/ (name = target without "_fuzz"). Exits non-zero if the build
# fails or any target crashes, leaks or trips a sanitizer; crash inputs are kept in <build>/artifacts/.
set -euo pipefail
secs="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# PHI4MM_FUZZ_BUILD names a tree already configured with -DPHI4MM_FUZZ=ON and the sanitizers (CI
# shares its sanitizer tree this way); by default build-fuzz/ is configured here.
build="${PHI4MM_FUZZ_BUILD:-$root/build-fuzz}"

if [ -z "${PHI4MM_FUZZ_BUILD:-}" ]; then
  CC="${CC:-clang}" CXX="${CXX:-clang++}" cmake -S "$root" -B "$build" -G Ninja -DPHI4MM_FUZZ=ON \
    -DPHI4MM_SANITIZE=address,undefined -DPHI4MM_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
elif ! grep -q '^PHI4MM_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "PHI4MM_FUZZ_BUILD=$build is not a tree configured with -DPHI4MM_FUZZ=ON"
  exit 1
fi
targets=()
for src in "$root"/fuzz/*_fuzz.cc; do targets+=("$(basename "$src" .cc)"); done
ninja -C "$build" "${targets[@]}"

# Third-party leaks we cannot fix are suppressed by name (fuzz/lsan.supp); everything else fails.
export LSAN_OPTIONS="suppressions=$root/fuzz/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/artifacts"
# Each target is one single-threaded process: FUZZ_JOBS of them (default: one per core) run at once.
jobs="${FUZZ_JOBS:-$(nproc)}"
run_target() {
  local target=$1 exe="$build/fuzz/$1" corpus="$work/${1%_fuzz}" log="$work/$1.log"
  mkdir -p "$corpus"
  if [ -d "$root/fuzz/corpus/${target%_fuzz}" ]; then cp -r "$root/fuzz/corpus/${target%_fuzz}/." "$corpus/"; fi
  echo "=== $target: ${secs}s on $(find "$corpus" -type f | wc -l) seed file(s)" >"$work/$target.head"
  # A fixed seed (FUZZ_SEED, default 1) keeps CI reproducible; run with another seed to explore.
  if (cd "$root" && "$exe" -seed="${FUZZ_SEED:-1}" -max_total_time="$secs" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$target-" "$corpus") >"$log" 2>&1; then
    echo ok >"$work/$target.status"
  else
    echo failed >"$work/$target.status"
  fi
}
for target in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_target "$target" &
done
wait
failed=()
for target in "${targets[@]}"; do
  cat "$work/$target.head"
  if [ "$(cat "$work/$target.status" 2>/dev/null)" = ok ]; then
    grep -E '^stat::number_of_executed_units|Done [0-9]+ runs' "$work/$target.log" | tail -n 2 || true
  else
    echo "!!! $target failed; last lines of its log:"
    tail -n 60 "$work/$target.log"
    failed+=("$target")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz smoke FAILED: ${failed[*]} (inputs in $build/artifacts/)"
  exit 1
fi
echo "fuzz smoke passed"
