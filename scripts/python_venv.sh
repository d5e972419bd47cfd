#!/usr/bin/env bash
# Makes (once) a Python virtual environment at DIR and installs the pinned packages of
# REQUIREMENTS into it; the Python test stages (scripts/python_tests.sh, scripts/onnx_checks.sh)
# share it. Installs Debian's python3-venv first when python3 lacks it (Debian splits it out).
# Further arguments go to pip (e.g. --require-hashes).
# Usage: scripts/python_venv.sh DIR REQUIREMENTS [PIP_ARGS...]
set -euo pipefail
venv=$1 requirements=$2
shift 2
if ! python3 -c "import ensurepip, venv" 2>/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv
fi
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/pip" install --quiet --disable-pip-version-check "$@" -r "$requirements"
