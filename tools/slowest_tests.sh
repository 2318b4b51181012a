#!/usr/bin/env bash
# The N slowest test targets of `bazel test` runs whose output was saved
# (run.sh saves them under out/ci/), from Bazel's summary lines
# ("//pkg:target   PASSED in 12.3s"):
#   tools/slowest_tests.sh [N] [LOG...]   (default: 10, out/ci/*tests.log)
set -uo pipefail
cd "$(dirname "$0")/.."
count="${1:-10}"
shift || true
logs=("$@")
((${#logs[@]} == 0)) && logs=(out/ci/*tests.log)
rows=$(for log in "${logs[@]}"; do
  [[ -f "$log" ]] || continue
  pass=$(basename "$log" .log)
  sed -nE 's/^(\/\/[^ ]+) +(\(cached\) )?[A-Z]+ in ([0-9.]+)s.*/\3 \1/p' "$log" |
    while read -r seconds target; do echo "$seconds $pass $target"; done
done | sort -gr | head -n "$count")
[[ -z "$rows" ]] && exit 0
echo
echo "slowest $count test targets:"
while read -r seconds pass target; do
  printf '%8.1f s  %-10s  %s\n' "$seconds" "$pass" "$target"
done <<<"$rows"
