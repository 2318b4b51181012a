#!/usr/bin/env bash
# Prints every test case that was skipped in the last `bazel test` run, with
# its reason, from the test logs under the given directory (default
# bazel-testlogs): gtest's "[  SKIPPED ]" and pytest's "-rs" lines.
#   tools/report_skipped.sh [bazel-testlogs|bazel-asan-testlogs]
# With CI=true it exits 1 when a skipped case is not listed in
# tests/allowed_skips.txt (the GPU-only cases): a test that cannot run in
# CI fails there rather than passing as skipped. A pytest skip is named
# "//target pytest:FILE" (pytest's -rs lines name no test).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
logs="${1:-bazel-testlogs}"
allowed=tests/allowed_skips.txt
found=0
unlisted=()
while IFS= read -r -d '' log; do
  target="${log#"$logs"/}"
  target="//${target%/test.log}"
  # A sharded target's logs are in shard_I_of_N/, repeated runs' in
  # run_I_of_N/ (--runs_per_test).
  [[ "$target" =~ /(shard|run)_[0-9]+_of_[0-9]+$ ]] && target="${target%/*}"
  [[ "$target" =~ /(shard|run)_[0-9]+_of_[0-9]+$ ]] && target="${target%/*}"
  target="${target%/*}:${target##*/}"
  # gtest: the reason is printed just before the "[  SKIPPED ] Test" line.
  reasons=$(grep -B1 -E '^\[  SKIPPED \] [A-Za-z0-9_]+\.[A-Za-z0-9_/]+ \(' "$log" |
            grep -vE '^(--|\[  SKIPPED \])' | sed 's/^/    /')
  cases=$(grep -E '^\[  SKIPPED \] [A-Za-z0-9_]+\.[A-Za-z0-9_/]+ \(' "$log" |
          sed -E 's/^\[  SKIPPED \] ([^ ]+) .*/\1/')
  pytest=$(grep -E '^SKIPPED \[' "$log")
  if [[ -n "$cases$pytest" ]]; then
    found=1
    echo "$target"
    [[ -n "$cases" ]] && sed 's/^/  /' <<<"$cases" && echo "$reasons"
    [[ -n "$pytest" ]] && sed 's/^/  /' <<<"$pytest"
    while IFS= read -r c; do
      [[ -z "$c" ]] && continue
      grep -qxF "$target $c" "$allowed" || unlisted+=("$target $c")
    done <<<"$cases"
    while IFS= read -r line; do
      [[ -z "$line" ]] && continue
      file=$(sed -E 's/^SKIPPED \[[0-9]+\] ([^:]+):.*/\1/' <<<"$line")
      grep -qxF "$target pytest:$file" "$allowed" ||
        unlisted+=("$target pytest:$file")
    done <<<"$pytest"
  fi
done < <(find -L "$logs" -name test.log -print0 2>/dev/null)
if ((found == 0)); then
  echo "skipped tests: none"
fi
if ((${#unlisted[@]} > 0)); then
  echo "skipped but not in $allowed (CI must run them):"
  printf '  %s\n' "${unlisted[@]}"
  [[ "${CI:-}" == "true" ]] && exit 1
fi
exit 0
