#!/usr/bin/env bash
# The two commands a new user needs (see README.md):
#   ./run.sh main   install, build, and run the main job on a local cluster
#   ./run.sh test   install, build, and run every test (also under ASan)
set -euo pipefail
cd "$(dirname "$0")"

main_job() {
  tools/install_deps.sh
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

run_tests() {
  tools/install_deps.sh
  # Style and lock discipline first (about a minute): clang-format, black
  # and flake8, and clang's thread-safety analysis of the ABSL_GUARDED_BY
  # annotations.
  tools/lint/check_format.sh
  tools/lint/check_python.sh
  tools/lint/check_thread_safety.sh
  bazel test //...
  tools/report_skipped.sh bazel-testlogs
  # The same suites again with AddressSanitizer and UBSan (servers too);
  # the network-namespace suites run only their cases that no other
  # ASan-run test covers (tests/netns/BUILD), to stay within CI's 90 min.
  bazel test --config=asan --test_tag_filters=-heavy //...
  tools/report_skipped.sh bazel-asan-testlogs
  # libFuzzer on what crosses the wire and the disk (requests, checkpoint
  # files, S3 answers, input files), 30 s a target; longer runs:
  # tests/fuzz/run_fuzzers.sh SECONDS [TARGET...]
  tests/fuzz/run_fuzzers.sh 30
}

case "${1:-}" in
  main) main_job ;;
  test) run_tests ;;
  *)
    echo "usage: ./run.sh main | test" >&2
    exit 2
    ;;
esac
