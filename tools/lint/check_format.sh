#!/usr/bin/env bash
# Fails if any C++ file of psrt differs from clang-format's Google style
# (.clang-format); prints what it would change. To fix:
#   git ls-files '*.cc' '*.h' | grep -v '^third_party/' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/../.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' | grep -v '^third_party/')
if ! clang-format --dry-run --Werror "${files[@]}"; then
  echo "format: the files above are not clang-formatted (see the fix in $0)" >&2
  exit 1
fi
echo "format: ${#files[@]} C++ files clang-formatted"
