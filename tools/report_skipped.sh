#!/usr/bin/env bash
# Prints every test case that was skipped in the last `bazel test` run, with
# its reason, from the test logs under the given directory (default
# bazel-testlogs): gtest's "[  SKIPPED ]" and pytest's "-rs" lines.
#   tools/report_skipped.sh [bazel-testlogs|bazel-asan-testlogs]
set -uo pipefail
cd "$(dirname "$0")/.."
logs="${1:-bazel-testlogs}"
found=0
while IFS= read -r -d '' log; do
  target="${log#"$logs"/}"
  target="//${target%/test.log}"
  # gtest: the reason is printed just before the "[  SKIPPED ] Test" line.
  reasons=$(grep -B1 -E '^\[  SKIPPED \] [A-Za-z0-9_]+\.[A-Za-z0-9_/]+ \(' "$log" |
            grep -vE '^(--|\[  SKIPPED \])' | sed 's/^/    /')
  cases=$(grep -E '^\[  SKIPPED \] [A-Za-z0-9_]+\.[A-Za-z0-9_/]+ \(' "$log" |
          sed 's/^\[  SKIPPED \] /  /')
  pytest=$(grep -E '^SKIPPED \[' "$log" | sed 's/^/  /')
  if [[ -n "$cases$pytest" ]]; then
    found=1
    echo "$target"
    [[ -n "$cases" ]] && echo "$cases" && echo "$reasons"
    [[ -n "$pytest" ]] && echo "$pytest"
  fi
done < <(find -L "$logs" -name test.log -print0 2>/dev/null)
if ((found == 0)); then
  echo "skipped tests: none"
fi
exit 0
