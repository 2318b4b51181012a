#!/usr/bin/env bash
# The commands a new user needs (see README.md):
#   ./run.sh main   install, build, and run the main job on a local cluster
#   ./run.sh test   install, build, and run every test (also under ASan);
#                   CI runs this, within 40 minutes on 2 cores
#   ./run.sh soak   the long runs kept out of CI (hours; see README.md)
set -euo pipefail
cd "$(dirname "$0")"

main_job() {
  tools/install_deps.sh main
  bazel build //ps_server //ps_worker //tools/ctr_datagen //tools/psctl
  # 1M training examples (>1M distinct ids) from a planted click model; it
  # prints the best AUC any model can reach on the test set.
  local data=out/ctr_data
  if [[ ! -f "$data/planted.json" ]]; then
    bazel-bin/tools/ctr_datagen/ctr_datagen --output_dir="$data" \
      --train_examples=1000000 --test_examples=100000 --format=tfrecord
  fi
  cat "$data/planted.json"
  # Two "hosts" on this machine, each with a ps_server and a ps_worker,
  # training DeepFM asynchronously for 2 epochs; worker 0 then evaluates on
  # the test set, and psctl shows how the servers share the parameters.
  # When the workers are done the servers get SIGTERM and PS 0 takes a
  # final checkpoint of both; psctl then lists it with the bytes per PS.
  rm -rf out/checkpoints
  /usr/bin/python3 deploy/local/launch.py --hosts=2 \
    --ps_flag=--checkpoint_uri="$PWD/out/checkpoints" -- \
    bazel-bin/ps_worker/ps_worker --model=deepfm \
      --train_files="$data/train-*" --eval_files="$data/test.tfrecords" \
      --epochs=2 --batch_size=1024 --log_every_steps=100
  bazel-bin/tools/psctl/psctl --checkpoint_uri="$PWD/out/checkpoints" checkpoints
}

# Stage timing: `stage NAME COMMAND...` runs COMMAND and records its wall
# time; the table (and the slowest test targets) is printed on exit, pass
# or fail.
stage_names=()
stage_seconds=()
stage() {
  local name=$1 start=$SECONDS
  shift
  echo "=== stage: $name"
  local rc=0
  "$@" || rc=$?
  stage_names+=("$name")
  stage_seconds+=($((SECONDS - start)))
  return "$rc"
}
print_stage_table() {
  local rc=$?
  ((${#stage_names[@]} == 0)) && return
  echo
  echo "stage                 wall time"
  local total=0 i
  for i in "${!stage_names[@]}"; do
    printf '%-20s %6d s\n' "${stage_names[$i]}" "${stage_seconds[$i]}"
    total=$((total + stage_seconds[i]))
  done
  printf '%-20s %6d s%s\n' total "$total" "$( ((rc == 0)) || echo "  (failed: exit $rc)")"
  tools/slowest_tests.sh 10 out/ci/tests.log out/ci/quality-tests.log out/ci/asan-tests.log || true
  tools/failed_tests.sh 80 out/ci/tests.log out/ci/quality-tests.log out/ci/asan-tests.log || true
}

# Every test runs in one of two passes, never both (the fast ones ran
# twice, and their tests were compiled twice, for nothing the ASan pass
# does not prove; docs/benchmarks.md, "CI's stages"):
# - optimized: the targets tagged heavy (training-quality runs, the
#   network-namespace suites, the cgroup fill) or no_asan (no C++ path of
#   their own: the Python client's, the image's), and the Quality* cases
#   (held-out AUC bounds of whole training runs) of the targets tagged
#   quality, which need the optimized build's speed;
# - ASan and UBSan (servers too): every other test, Quality* cases aside.
# ./run.sh soak runs everything under ASan.

# `bazel query QUERY`, failing (not printing nothing) when the query fails;
# its messages are shown only then.
tests_query() {
  local out err rc=0
  err=$(mktemp)
  out=$(bazel query --noshow_progress "$1" 2>"$err") || rc=$?
  if ((rc != 0)); then
    cat "$err" >&2
    echo "bazel query failed: $1" >&2
  fi
  rm -f "$err"
  ((rc == 0)) || return "$rc"
  [[ -z "$out" ]] || echo "$out"
}
# The labels a query gives, into the array named NAME; fails on a query
# that fails or gives none (a pass with no targets would pass).
targets_into() {
  local -n into=$1
  local out
  out=$("$2") || return 1
  if [[ -z "$out" ]]; then
    echo "no targets from $2" >&2
    return 1
  fi
  # shellcheck disable=SC2034  # a nameref: fills the caller's array
  mapfile -t into <<<"$out"
}
# The tests that run in the optimized pass only (the query, once).
optimized_only='attr(tags, "\b(heavy|no_asan)\b", tests(//...))'
optimized_test_targets() {
  tests_query "$optimized_only"
}
quality_test_targets() {
  tests_query "attr(tags, \"\\bquality\\b\", tests(//...)) except $optimized_only"
}
asan_test_targets() {
  tests_query "tests(//...) except $optimized_only"
}
# What the optimized pass builds: every binary and library users run (the
# benchmarks and tools too), and its own tests; the tests only the ASan
# pass runs are compiled there alone.
optimized_build_targets() {
  tests_query "(//... except attr(testonly, 1, //...)) union $optimized_only
    union attr(tags, \"\\bquality\\b\", tests(//...))"
}
# A test case named Quality* in a target tagged neither heavy nor quality
# would run in no pass: the build refuses that.
check_quality_tags() {
  local files=() f labels=""
  mapfile -t files < <(git grep -lE 'TEST(_F|_P)?\([A-Za-z0-9_]+, *Quality' -- '*.cc')
  ((${#files[@]} == 0)) && return 0
  for f in "${files[@]}"; do labels+=" //${f%/*}:${f##*/}"; done
  local tagged='attr(tags, "\b(heavy|quality)\b", tests(//...))' untagged
  untagged=$(tests_query "rdeps(tests(//...), set($labels), 1) intersect
    tests(//...) except $tagged") || return
  if [[ -n "$untagged" ]]; then
    echo "Quality* cases in tests tagged neither heavy nor quality" \
      "(no pass would run them): ${untagged//$'\n'/ }" >&2
    return 1
  fi
}
build_optimized() {
  check_quality_tags || return
  local targets
  targets_into targets optimized_build_targets || return
  bazel build -- "${targets[@]}"
}
run_optimized_tests() {
  local targets quality rc=0
  targets_into targets optimized_test_targets || return
  targets_into quality quality_test_targets || return
  bazel_test_logged tests "${targets[@]}" || rc=$?
  bazel_test_logged quality-tests --test_env=GTEST_FILTER='*.Quality*' \
    "${quality[@]}" || rc=$?
  return "$rc"
}

# `bazel test ARGS...`, its output also saved in out/ci/NAME.log (for the
# slowest-targets table).
bazel_test_logged() {
  local name=$1
  shift
  mkdir -p out/ci
  bazel test "$@" 2>&1 | tee "out/ci/$name.log"
}

# The C++ sources the ASan pass compiles, one path a line: clang builds
# that pass with its thread-safety analysis as errors (.bazelrc), so the
# lint stage's own run of the analysis leaves them to it.
asan_pass_sources() {
  local targets labels
  targets_into targets asan_test_targets || return
  labels=$(tests_query "kind('source file', deps(set(${targets[*]})))") || return
  echo "$labels" | grep '^//.*\.cc$' | sed 's#^//##; s#^:##; s#:#/#'
}
lint_all() {
  local built
  built=$(mktemp)
  asan_pass_sources >"$built" &&
    tools/lint/check_format.sh && tools/lint/check_python.sh &&
    tools/lint/check_thread_safety.sh --except "$built"
  local rc=$?
  rm -f "$built"
  return "$rc"
}

run_tests() {
  trap print_stage_table EXIT
  stage install tools/install_deps.sh test
  # Style and lock discipline first: clang-format, black and flake8, and
  # clang's thread-safety analysis of the ABSL_GUARDED_BY annotations in
  # the sources the ASan pass (which analyzes its own) does not build.
  stage lint lint_all
  stage build build_optimized
  stage tests run_optimized_tests
  tools/report_skipped.sh bazel-testlogs
  local targets
  targets_into targets asan_test_targets
  stage "asan build" bazel build --config=asan "${targets[@]}"
  stage "asan tests" bazel_test_logged asan-tests --config=asan \
    --test_env=GTEST_FILTER='-*.Quality*' "${targets[@]}"
  tools/report_skipped.sh bazel-asan-testlogs
  # libFuzzer on what crosses the wire and the disk (requests, checkpoint
  # files, S3 answers, input files), 30 s a target, a target per core;
  # longer runs: tests/fuzz/run_fuzzers.sh SECONDS [TARGET...]
  stage fuzz tests/fuzz/run_fuzzers.sh 30
}

# The long runs CI does not make (see README.md, "Soak"): each passes or
# fails on its own checks; the whole takes hours on 2 cores.
run_soak() {
  trap print_stage_table EXIT
  stage install tools/install_deps.sh test
  # Every test under ASan, heavy ones included: the whole network-namespace
  # suites, training quality, the cgroup fill.
  stage "asan all" bazel_test_logged asan-tests --config=asan \
    --test_timeout=7200 //...
  tools/report_skipped.sh bazel-asan-testlogs
  # An hour of libFuzzer per target.
  stage "fuzz 1h" tests/fuzz/run_fuzzers.sh "${SOAK_FUZZ_SECONDS:-3600}"
  # DeepFM on a 50M-id drifting stream, unbounded and at a tenth of its
  # memory (RSS within budget, AUC within 0.005 of unbounded).
  stage build bazel build //ps_server //ps_worker //tools/ctr_datagen //tools/psctl \
    //tests/netns:netns_replicated_test
  stage "50M-id stream" /usr/bin/python3 tools/bench/stream_budget_bench.py
  # 50 rounds of a PS killed mid-training on 2 hosts (R=2, bounded
  # tables) beside a control run: every push applied exactly once.
  stage "failover x50" /usr/bin/python3 tools/bench/failover_soak.py --rounds=50
}

case "${1:-}" in
  main) main_job ;;
  test) run_tests ;;
  soak) run_soak ;;
  *)
    echo "usage: ./run.sh main | test | soak" >&2
    exit 2
    ;;
esac
