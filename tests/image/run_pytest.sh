#!/usr/bin/env bash
set -euo pipefail
cd "${TEST_SRCDIR:-.}/psrt" 2>/dev/null || true
exec /usr/bin/python3 -m pytest -q -s -rs -p no:cacheprovider tests/image "$@"
