#!/usr/bin/env bash
# clang-format and clang-tidy on what a change touches: the C++ lines changed since BASE
# (default HEAD~1, the last commit; PHI4MM_LINT_BASE or the first argument overrides it).
# `git clang-format` checks the changed lines against .clang-format; clang-tidy-diff runs the
# checks of .clang-tidy on the changed lines of the .cc files that build/compile_commands.json
# compiles (the release tree; files it does not compile, such as the Python extension's outside a
# PHI4MM_PYTHON tree, are skipped and named). Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-${PHI4MM_LINT_BASE:-HEAD~1}}
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
  echo "[lint] no commit $base to compare with: nothing to check"
  exit 0
fi
paths=(src tools tests fuzz bench)
fmt=$(git clang-format-14 --diff --extensions cc,h "$base" -- "${paths[@]}" || true)
case "$fmt" in
  "no modified files to format"|"clang-format did not modify any files"|"") echo "[lint] clang-format: the changed lines are formatted" ;;
  *) echo "$fmt"; echo "[lint] clang-format: run \`git clang-format $base\`"; exit 1 ;;
esac
db=build/compile_commands.json
[ -f "$db" ] || { echo "[lint] $db is missing: build the release tree first (cmake --preset release)"; exit 1; }
mapfile -t changed < <(git diff --name-only --diff-filter=AM "$base" -- "${paths[@]/%//*.cc}")
checked=()
for f in "${changed[@]}"; do
  if grep -q "\"file\": \"$PWD/$f\"" "$db"; then checked+=("$f"); else echo "[lint] clang-tidy: $f is not in $db, skipped"; fi
done
if [ "${#checked[@]}" -eq 0 ]; then echo "[lint] clang-tidy: no changed file to check"; exit 0; fi
out=$(git diff -U0 "$base" -- "${checked[@]}" | clang-tidy-diff-14.py -p1 -path build -quiet -j "$(nproc)" 2>&1 || true)
if grep -q "error:" <<<"$out"; then
  grep -v "^Suppressed\|^Use -header\|warnings generated" <<<"$out"
  echo "[lint] clang-tidy found the above"
  exit 1
fi
echo "[lint] clang-tidy: ${#checked[@]} changed file(s) clean"
