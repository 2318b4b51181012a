#!/usr/bin/env bash
# The two commands a new user needs (see README.md):
#   ./run.sh main   install, build, and run the main job on a local cluster
#   ./run.sh test   install, build, and run every test (also under ASan)
set -euo pipefail
cd "$(dirname "$0")"

main_job() {
  tools/install_deps.sh
  bazel build //ps_server //tools/ps_bench //tools/psctl
  # Two "hosts" on this machine: two ps_servers; one worker drives them with
  # ps_bench (dense and embedding push/pull vs raw TCP), then shows where the
  # shards live and how balanced the servers are.
  /usr/bin/python3 deploy/local/launch.py --hosts=2 --workers=1 -- \
    bash -c 'bazel-bin/tools/ps_bench/ps_bench --seconds=2 --repeat=1 &&
             bazel-bin/tools/psctl/psctl variables &&
             bazel-bin/tools/psctl/psctl balance'
}

run_tests() {
  tools/install_deps.sh
  bazel test //...
  # The same suites again with AddressSanitizer and UBSan (servers too).
  bazel test --config=asan //...
}

case "${1:-}" in
  main) main_job ;;
  test) run_tests ;;
  *)
    echo "usage: ./run.sh main | test" >&2
    exit 2
    ;;
esac
