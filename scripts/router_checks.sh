#!/usr/bin/env bash
# Replicas behind vLLM's router (tools/replicas/replica_driver.py, docs/deploy.md): makes
# build/router-venv with vllm-router (pinned, checked by hash; x86-64 CPython 3.11 wheels), then
# runs 2 replicas of build/phi4mm serve on the trained fixture behind vllm-router, 16 clients x
# 4-turn image chats under cache_aware, round_robin and consistent_hash (X-Session-ID), then
# consistent_hash again with one replica SIGKILLed after 20 requests, and fails unless the
# driver's --check holds.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== replicas behind vllm-router (tools/replicas) =="
venv=build/router-venv
bash scripts/python_venv.sh "$venv" tools/replicas/requirements.txt --require-hashes
python3 tools/replicas/replica_driver.py --model tests/fixtures/trained/orig --router "$venv/bin/vllm-router" \
  --phi4mm "${PHI4MM_BIN:-$PWD/build/phi4mm}" --policies cache_aware,round_robin,consistent_hash,consistent_hash \
  --clients 16 --turns 4 --kill-after 20 --deadline 300 --request-timeout 120 --check
