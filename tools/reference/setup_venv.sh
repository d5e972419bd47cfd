#!/usr/bin/env bash
# Creates tools/reference/.venv (gitignored) with the pinned versions from requirements.txt.
# Idempotent: an existing venv whose pins already match is left alone.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
if "$venv/bin/python" - "$here/requirements.txt" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    have = version(name).split("+")[0]
    if have != want:
        sys.exit(1)
PY
  echo "tools/reference/.venv is up to date"
  exit 0
fi
"$venv/bin/python" -m pip install --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -r "$here/requirements.txt"
echo "tools/reference/.venv ready"
