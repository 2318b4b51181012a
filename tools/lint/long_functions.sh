#!/usr/bin/env bash
# Lists C++ functions (tests and fuzzers excluded) longer than LIMIT lines
# (default 80), longest first, with Universal Ctags: a report for review,
# not a gate. Long functions that mix phases are where newcomers get lost;
# split them into named phases.
#   tools/lint/long_functions.sh [LIMIT]
set -euo pipefail
cd "$(dirname "$0")/../.."
limit="${1:-80}"
command -v ctags >/dev/null || { echo "long_functions: needs universal-ctags" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cc' | grep -v '^third_party/' |
  grep -v '_test\.cc$' | grep -v '^tests/')
ctags -x --c++-kinds=f --fields=+ne -u --_xformat="%N %F %n %e" "${files[@]}" |
  awk -v limit="$limit" '{ n = $4 - $3 + 1; if (n > limit) printf "%5d  %s  %s:%d\n", n, $1, $2, $3 }' |
  sort -rn
