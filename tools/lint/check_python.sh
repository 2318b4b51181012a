#!/usr/bin/env bash
# Fails if psrt's Python differs from black's formatting (pyproject.toml) or
# has a flake8 finding (.flake8); Debian's black and flake8. To fix the
# formatting: git ls-files '*.py' | xargs black
set -euo pipefail
cd "$(dirname "$0")/../.."
mapfile -t files < <(git ls-files '*.py')
if ! black --check --quiet "${files[@]}"; then
  black --check "${files[@]}" 2>&1 | grep -v "^All done\|left unchanged" >&2 || true
  echo "python: the files above are not black-formatted (see the fix in $0)" >&2
  exit 1
fi
flake8 "${files[@]}"
echo "python: ${#files[@]} files black-formatted, no flake8 findings"
