#!/usr/bin/env bash
# The portability checks (docs/portability.md), CI's portability stage. Needs the x86-64 build in
# build/ (scripts/test.sh makes it) and installs QEMU and the aarch64 cross toolchain
# (scripts/setup_cross.sh). Stages, each small enough for CI's time (times measured on a 2-core
# machine are in docs/portability.md):
#  1. x86-64, PHI4MM_ISA=scalar: the whole test suite on the scalar tables.
#  2. x86-64 without AVX (qemu-x86_64 -cpu Nehalem): the CLI smoke (info names the scalar table,
#     run answers, an AVX2 override is refused) and the kernel + parity tests.
#  3. aarch64 (cross-built with cmake/aarch64-linux-gnu.cmake, only phi4mm_cli and phi4mm_tests),
#     under qemu-aarch64 with the dot product (-cpu max: the neon and neondot tables) and without
#     (-cpu cortex-a72: neon): the kernel tests of every table against scalar on odd shapes and
#     tails, the decoder, vision and speech parity tests, and a `phi4mm run` smoke.
#  4. A q4 and a q8 `phi4mm quantize` folder written on x86-64 and on aarch64 are byte-identical,
#     and each binary gives the same greedy tokens from either folder.
# STAGES="1 2 3 4" (the default) picks stages; STAGES=cross only makes the aarch64 build of stage 3
# (CI starts it early, at low priority, beside other stages).
set -euo pipefail
cd "$(dirname "$0")/.."
stages=" ${STAGES:-1 2 3 4} "
jobs=$(nproc)
fixture=tests/fixtures/tiny/orig
kernel_tests='Isa*:*BatchInvariance*:QuantKernels*:QuantActivations*:QuantFormat*:Attention*:KvCacheAttention*:VisionKernels*:VisionOps*:Ops*:WeightMatrix*:LoraLinear*'
parity_tests='*DecoderParity*:*SpeechEncoderParity*:*SpeechEndToEnd*:*VisionEndToEnd*:*VisionFeatures*'
# Suites that never reach a kernel (tokenizer, parsers, HTTP, CLI errors, sampler, thread pool,
# symbol checks): stage 1 leaves them out, a second run on the scalar tables gains nothing.
isa_free_tests='(^|/)(LoadErrors|TokenizerTest|Server[A-Za-z0-9]*|OnnxWriterTest|Manifest[A-Za-z]*|ExportOptionsTest|ChatFormatTest|CliErrors|Config|ModelConfig|Safetensors|Checkpoint|Sha256|AudioDecode|ImageDecode|Sampler|ThreadPool[A-Za-z]*|Quantize|BenchCommand|IsaObjectsShareNoWeakSymbols|IsaSymbolCheckCatchesSharedInline|ExportPackageTest)(\.|$)'
# The test files the aarch64 build compiles: those holding the kernel and parity tests.
arm_test_files='isa|batch_invariance|quant_kernels|attention|kv_cache|vision_kernels|kernels|activations|decoder_parity|vision_parity|speech_parity'
bash scripts/setup_cross.sh
[ -x build/phi4mm ] && [ -x build/tests/phi4mm_tests ] || { echo "build/ first (scripts/test.sh)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Runs "$@", requiring exit 0 and that stdout+stderr contain $want.
expect() {
  local want=$1
  shift
  local out
  out=$("$@" 2>&1) || { echo "FAILED ($?): $*"; echo "$out" | tail -20; exit 1; }
  grep -qF -- "$want" <<< "$out" || { echo "FAILED: '$want' not in the output of: $*"; echo "$out" | tail -20; exit 1; }
}
# Runs "$@", requiring failure with $want in stderr.
expect_error() {
  local want=$1
  shift
  local out
  if out=$("$@" 2>&1); then echo "FAILED: succeeded: $*"; exit 1; fi
  grep -qF -- "$want" <<< "$out" || { echo "FAILED: '$want' not in the error of: $*"; echo "$out" | tail -20; exit 1; }
}

if [[ $stages == *" 1 "* ]]; then
  echo "== portability 1: every test that reaches a kernel, with PHI4MM_ISA=scalar =="
  SECONDS=0
  PHI4MM_ISA=scalar ctest --test-dir build --output-on-failure -j "$jobs" -E "$isa_free_tests"
  echo "stage 1: ${SECONDS} s"
fi

if [[ $stages == *" 2 "* ]]; then
  echo "== portability 2: x86-64 without AVX (qemu-x86_64 -cpu Nehalem) =="
  SECONDS=0
  q86=(qemu-x86_64 -cpu Nehalem)
  expect "kernels:         scalar (this CPU and build offer scalar;" "${q86[@]}" build/phi4mm info -m "$fixture"
  expect_error "this CPU lacks AVX2" env PHI4MM_ISA=avx2 "${q86[@]}" build/phi4mm info -m "$fixture"
  expect_error "this CPU lacks AVX2, FMA, F16C, BMI2 and AVX-VNNI" env PHI4MM_ISA=avxvnni "${q86[@]}" build/phi4mm info -m "$fixture"
  "${q86[@]}" build/phi4mm run -m "$fixture" -p "hello" -n 6 > "$tmp/nehalem_run.txt"
  build/phi4mm run -m "$fixture" -p "hello" -n 6 > "$tmp/native_run.txt"
  cmp "$tmp/nehalem_run.txt" "$tmp/native_run.txt" || { echo "FAILED: the answer differs without AVX"; exit 1; }
  bash scripts/gtest_shards.sh "$jobs" "${q86[@]}" build/tests/phi4mm_tests --gtest_brief=1 --gtest_filter="$kernel_tests:$parity_tests"
  echo "stage 2: ${SECONDS} s"
fi

# The arm64 loader of Debian's multiarch libc6:arm64 (pulled in by the :arm64 -dev packages) is run
# directly, not through QEMU's -L sysroot prefix: under -L, the first pthread_create of any
# dynamically linked program spins forever (QEMU 7.2 and 10.0 alike, docs/portability.md).
qa=(qemu-aarch64 /lib/ld-linux-aarch64.so.1)
if [[ $stages == *" 3 "* || $stages == *" 4 "* || $stages == *" cross "* ]]; then
  echo "== portability 3: aarch64 cross build (phi4mm_cli, phi4mm_tests) =="
  SECONDS=0
  # CMakePresets.json "aarch64": the cross toolchain, -Werror, PHI4MM_GRAMMAR=OFF (setup.sh builds
  # XGrammar for the host only).
  cmake --preset aarch64 "-DPHI4MM_TEST_SUBSET=$arm_test_files"
  cmake --build build-aarch64 -j "$jobs" --target phi4mm_cli phi4mm_tests
  echo "aarch64 build: ${SECONDS} s"
fi

if [[ $stages == *" 3 "* ]]; then
  for cpu in max cortex-a72; do
    SECONDS=0
    want=neondot
    [ "$cpu" = max ] || want=neon
    echo "-- qemu-aarch64 -cpu $cpu (expects the $want table) --"
    expect "kernels:         $want (" env QEMU_CPU=$cpu "${qa[@]}" build-aarch64/phi4mm info -m "$fixture"
    [ "$cpu" = max ] || expect_error "this CPU lacks Advanced SIMD with the dot-product" \
      env QEMU_CPU=$cpu PHI4MM_ISA=neondot "${qa[@]}" build-aarch64/phi4mm info -m "$fixture"
    env QEMU_CPU=$cpu "${qa[@]}" build-aarch64/phi4mm run -m "$fixture" -p "hello" -n 6 > "$tmp/arm_run_$cpu.txt"
    [ -s "$tmp/arm_run_$cpu.txt" ] || { echo "FAILED: no answer on aarch64 ($cpu)"; exit 1; }
    bash scripts/gtest_shards.sh "$jobs" env QEMU_CPU=$cpu "${qa[@]}" build-aarch64/tests/phi4mm_tests --gtest_brief=1 --gtest_filter="$kernel_tests:$parity_tests"
    echo "aarch64 $cpu: ${SECONDS} s"
  done
fi

if [[ $stages == *" 4 "* ]]; then
  echo "== portability 4: pre-quantized folders across architectures =="
  SECONDS=0
  for q in q4 q8; do
    build/phi4mm quantize -m "$fixture" -o "$tmp/x86_$q" --quant "$q" > /dev/null
    QEMU_CPU=max "${qa[@]}" build-aarch64/phi4mm quantize -m "$fixture" -o "$tmp/arm_$q" --quant "$q" > /dev/null
    diff -r "$tmp/x86_$q" "$tmp/arm_$q" > /dev/null || { echo "FAILED: $q folders differ between x86-64 and aarch64"; exit 1; }
    for dir in x86 arm; do
      build/phi4mm run -m "$tmp/${dir}_$q" -p "hello" -n 8 > "$tmp/run_x86_from_$dir.txt"
      QEMU_CPU=max "${qa[@]}" build-aarch64/phi4mm run -m "$tmp/${dir}_$q" -p "hello" -n 8 > "$tmp/run_arm_from_$dir.txt"
    done
    for f in run_x86_from_arm run_arm_from_x86 run_arm_from_arm; do
      cmp "$tmp/run_x86_from_x86.txt" "$tmp/$f.txt" || { echo "FAILED: $q $f answers differently"; exit 1; }
    done
    echo "$q: the same folder bytes and the same answer on x86-64 and aarch64: $(head -c 80 "$tmp/run_x86_from_x86.txt")"
  done
  echo "stage 4: ${SECONDS} s"
fi
echo "portability checks: ok"
