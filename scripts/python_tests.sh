#!/usr/bin/env bash
# The Python tests of `phi4mm serve` (tests/python): makes a virtual environment in
# build/python-venv (never committed), installs the pinned PyPI packages of
# tests/python/requirements.txt (the official `openai` client and pytest) and
# requirements-langchain.txt (LangChain's ChatOpenAI, for item 9), then runs the pytest
# suite (the spec's section I) and the load driver (section J) against build/phi4mm on loopback.
# Needs build/phi4mm built, python3 with venv, and curl. PHI4MM_BIN overrides the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== the server through the official openai client (tests/python: pytest, then the load driver) =="
venv=build/python-venv
bash scripts/python_venv.sh "$venv" tests/python/requirements.txt
bash scripts/python_venv.sh "$venv" tests/python/requirements-langchain.txt
export PHI4MM_BIN="${PHI4MM_BIN:-$PWD/build/phi4mm}"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python
# 64 clients x 4 requests on the server's defaults (bursts queue, never 429), /health every 0.5 s,
# with 64 slowloris connections beside them.
"$venv/bin/python" tests/python/load_driver.py --workers 64 --per-worker 4 --health-every 0.5 --slow-clients 64
