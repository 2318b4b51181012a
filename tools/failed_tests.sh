#!/usr/bin/env bash
# Why tests failed, from `bazel test` runs whose output was saved (run.sh
# saves them under out/ci/): each failed GoogleTest assertion with the
# lines after it, pytest's failures, sanitizer reports. Printed last by
# run.sh, so that the tail of a CI report -- often all a reader gets --
# says which case failed and why, not only which target.
#   tools/failed_tests.sh [LINES] [LOG...]   (default: 80, out/ci/*tests.log)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
lines="${1:-80}"
shift || true
logs=("$@")
((${#logs[@]} == 0)) && logs=(out/ci/*tests.log)
found=$(for log in "${logs[@]}"; do
  [[ -f "$log" ]] || continue
  grep -E -A6 \
    -e ': Failure$' -e '^\[  FAILED  \] [^ ]+ \(' -e '^FAILED ' -e '^E   ' \
    -e 'ERROR: (Address|Leak|Undefined)Sanitizer' -e ': runtime error: ' \
    "$log" | grep -v '^--$' | sed "s|^|$(basename "$log" .log): |"
done | head -n "$lines")
[[ -z "$found" ]] && exit 0
echo
echo "why tests failed (each failure and the 6 lines after it; $lines lines at most):"
echo "$found"
