#!/usr/bin/env bash
# Runs llama.cpp's llama-batched-bench on the random Phi-4-mini GGUF (tools/anchors/README.md says
# how to build llama.cpp and write the file) and prints its table: prompt processing (S_PP) and
# batched decode (S_TG) at 1, 4 and 8 parallel sequences, the anchor for our batched decoder.
#
# Usage: tools/anchors/llama_batched_bench.sh LLAMA_BUILD_DIR MODEL.gguf [extra llama-batched-bench flags]
# Environment: THREADS (default 2), NPL (default 1,4,8), NPP (128), NTG (32), CTX (8192).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 LLAMA_BUILD_DIR MODEL.gguf [extra llama-batched-bench flags]" >&2
  exit 2
fi
build=$1 model=$2
shift 2

bin=
for cand in "$build/bin/llama-batched-bench" "$build/llama-batched-bench"; do
  [[ -x $cand ]] && { bin=$cand; break; }
done
[[ -n $bin ]] || { echo "$0: no llama-batched-bench under $build (build the target first)" >&2; exit 1; }
[[ -f $model ]] || { echo "$0: no such model file: $model" >&2; exit 1; }

threads=${THREADS:-2}
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -m)  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')  nproc=$(nproc)"
# `-lv 4`: since 0.3.36 ggml's info lines (the weight buffers below) only print at llama.cpp's trace level.
args=(-m "$model" -c "${CTX:-8192}" -b 2048 -ub 512 -npp "${NPP:-128}" -ntg "${NTG:-32}" -npl "${NPL:-1,4,8}"
      -t "$threads" -lv 4 "$@")
echo "# $bin ${args[*]}"
# llama.cpp logs go to stderr and the table to stdout; print a few log lines (file type, weight
# buffers: AMX / CPU_REPACK / CPU_Mapped, context) as "# " comments, then the table.
# On failure, the end of the log.
log=$(mktemp) out=$(mktemp)
trap 'rm -f "$log" "$out"' EXIT
if ! "$bin" "${args[@]}" >"$out" 2>"$log"; then
  tail -n 40 "$log" >&2
  echo "$0: llama-batched-bench failed" >&2
  exit 1
fi
grep -E 'print_info: (file type|file size|model params|n_rot|n_ctx_orig_yarn|n_swa) |load_tensors: .*buffer size|llama_context: (n_ctx|n_ctx_per_seq|n_seq_max|n_batch|n_ubatch|flash_attn|kv_unified) |system_info' "$log" \
  | sed 's/^/# /' || true
cat "$out"
