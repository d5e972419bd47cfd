#!/usr/bin/env bash
# The chat page's tests in a real browser (tests/browser): installs Debian's chromium and
# chromium-driver when missing, makes build/browser-venv with Selenium and pytest (pinned, each
# wheel checked by its hash), then drives headless Chromium against build/phi4mm serve on the
# trained fixture. Screenshots of the main states land in build/webui-screenshots/.
# Needs build/phi4mm built. PHI4MM_BIN overrides the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== the chat page in headless Chromium (tests/browser) =="
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver
fi
venv=build/browser-venv
bash scripts/python_venv.sh "$venv" tests/browser/requirements.txt --require-hashes
export PHI4MM_BIN="${PHI4MM_BIN:-$PWD/build/phi4mm}"
"$venv/bin/python" -m pytest -q -s -p no:cacheprovider tests/browser
echo "screenshots: build/webui-screenshots/"
