#!/usr/bin/env bash
# The Python package from this checkout as a user installs it: a fresh virtual environment
# (build/venv-package, never committed), the build requirements pinned by hash
# (tools/python/build-requirements.txt), `pip install .` (scikit-build-core compiling the library,
# the extension and the CLI with the project's CMake; timed), then the package's pytest suite
# (tests/python_package: parity with `phi4mm run`, threads, cancellation, structured output,
# errors) from outside the source tree, so it imports the installed package.
# Needs scripts/setup.sh's packages (and XGrammar). PHI4MM_PIP_ARGS adds pip arguments (CI passes
# -C cmake.define.PHI4MM_WERROR=ON so the compiles match the release tree's and ccache reuses them).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=build/venv-package
rm -rf "$venv"
bash scripts/python_venv.sh "$venv" tools/python/build-requirements.txt --require-hashes
bash scripts/python_venv.sh "$venv" tests/python_package/requirements.txt --require-hashes
start=$SECONDS
# shellcheck disable=SC2086
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation ${PHI4MM_PIP_ARGS:-} .
echo "[python package] pip install .: $((SECONDS - start)) s"
cd "$venv"
"$root/$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python_package"
