#!/usr/bin/env bash
# Runs the Python client's tests with Debian's python3 (see BUILD).
set -euo pipefail
cd "${TEST_SRCDIR:-.}/psrt" 2>/dev/null || true
export PSRT_PS_SERVER="$PWD/ps_server/ps_server"
export PSRT_CPP_PUSH_HELPER="$PWD/clients/python/tests/cpp_push_helper"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider clients/python/tests "$@"
