#!/usr/bin/env bash
# Runs one GoogleTest binary as N shards at once (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), for
# test runs that are slow in one process (sanitized builds, emulated CPUs). Prints each shard's
# output after all have finished and exits non-zero if any shard failed.
#   bash scripts/gtest_shards.sh N COMMAND [ARGS...]     (COMMAND may start with env/qemu)
set -uo pipefail
n=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pids=()
for ((i = 0; i < n; ++i)); do
  GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i "$@" > "$tmp/shard_$i.txt" 2>&1 &
  pids+=($!)
done
rc=0
for ((i = 0; i < n; ++i)); do
  wait "${pids[$i]}" || rc=1
done
for ((i = 0; i < n; ++i)); do
  echo "-- shard $((i + 1))/$n --"
  cat "$tmp/shard_$i.txt"
done
exit $rc
