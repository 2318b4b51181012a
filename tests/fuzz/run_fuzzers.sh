#!/usr/bin/env bash
# Builds psrt's libFuzzer targets with clang (-fsanitize=fuzzer,address,
# undefined) against Debian's libraries and runs each for a fixed time from
# its seed corpus (tests/fuzz/corpus/<target>). Fails on any crash, leak,
# UB report or timeout, leaving the input under out/fuzz/crashes/.
#
#   tests/fuzz/run_fuzzers.sh              # every target, 30 s each (CI)
#   tests/fuzz/run_fuzzers.sh 3600         # an hour each
#   tests/fuzz/run_fuzzers.sh 600 request_fuzzer
#
# What is built already (objects, targets) is built again only when a
# source or header changed.
#
# The corpus grown during a run stays in out/fuzz/corpus/<target>; the
# repo's seeds are never modified.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-30}"
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(request_fuzzer unary_request_fuzzer peer_request_fuzzer
           checkpoint_files_fuzzer s3_response_fuzzer record_reader_fuzzer
           example_cache_fuzzer rendezvous_fuzzer data_plane_frame_fuzzer)
fi
out=out/fuzz
mkdir -p "$out/gen" "$out/obj" "$out/crashes"

modules="grpc++ protobuf libglog libcurl libcrypto zlib absl_status absl_statusor
  absl_strings absl_str_format absl_synchronization absl_time absl_flat_hash_map
  absl_flat_hash_set absl_hash absl_random_random liburing"
# shellcheck disable=SC2086
cflags="-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined
  -fno-sanitize=vptr -fno-sanitize-recover=undefined -DEIGEN_FAST_MATH=0
  -I. -I$out/gen $(pkg-config --cflags $modules eigen3)"
# shellcheck disable=SC2086
libs="$(pkg-config --libs $modules) -lgflags"

# Generated into a scratch folder; a file replaces the kept one only when
# it differs, so that its object is not compiled again for a new mtime.
rm -rf "$out/gen.new"
mkdir -p "$out/gen.new"
protoc -I. --cpp_out="$out/gen.new" proto/ps.proto proto/tf_example.proto
(cd "$out/gen.new" && find . -type f) | while read -r f; do
  if ! cmp -s "$out/gen.new/$f" "$out/gen/$f"; then
    mkdir -p "$(dirname "$out/gen/$f")"
    cp "$out/gen.new/$f" "$out/gen/$f"
  fi
done
rm -rf "$out/gen.new"

# Every library source of the optimizer and shard packages (tests and
# benchmarks aside), listed by the directory so that a file added there is
# linked without editing this script.
library_sources=()
for src in ps_server/optimizers/*.cc ps_server/shards/*.cc; do
  [[ "$src" == *_test.cc || "$src" == *_benchmark.cc ]] || library_sources+=("$src")
done

# The library code the targets reach: wire format, partitioner, shards,
# optimizers, request handling, checkpoint files, storage, data readers.
sources=(
  "$out/gen/proto/ps.pb.cc" "$out/gen/proto/tf_example.pb.cc"
  proto/buffer_pool.cc proto/frame_reader.cc proto/frame_writer.cc
  proto/slice_lease.cc proto/data_plane_call.cc
  partitioner/cluster_spec.cc partitioner/shard_map.cc partitioner/variable_spec.cc
  partitioner/replica_placement.cc
  util/clock.cc util/crc32c.cc util/wire_dtype.cc
  "${library_sources[@]}"
  util/thread_pool.cc
  util/memory_headroom.cc
  ps_server/rpc/request_item.cc ps_server/rpc/pull_handler.cc
  ps_server/rpc/push_handler.cc ps_server/rpc/push_dedup.cc
  ps_server/rpc/rendezvous_store.cc
  dataplane/frame.cc dataplane/connection_gate.cc security/hmac.cc
  ps_server/replication/replica_applier.cc ps_server/replication/snapshot_installer.cc
  ps_server/checkpoint/checkpoint_catalog.cc ps_server/checkpoint/shard_file.cc
  storage/storage.cc storage/file_storage.cc
  storage/s3_storage.cc storage/s3_xml.cc
  storage/http_client.cc storage/aws_credentials.cc
  ps_worker/data/input_file.cc ps_worker/data/record_reader.cc
  ps_worker/data/libsvm_reader.cc ps_worker/data/tfrecord_reader.cc
  ps_worker/data/criteo_tsv_reader.cc ps_worker/data/csv_reader.cc
  ps_worker/data/idx_reader.cc ps_worker/data/example_cache_file.cc
)
object_of() { echo "$out/obj/$(echo "$1" | tr '/' '_').o"; }
# A psrt header newer than file $1, if any (the generated ones too: they
# change only when their .proto does).
header_newer_than() {
  find proto partitioner util ps_server storage ps_worker dataplane security \
    tests/fuzz "$out/gen" -name '*.h' -newer "$1" -print -quit
}
objects=()
stale=()  # sources whose object is missing or older than it or a header
for src in "${sources[@]}"; do
  obj=$(object_of "$src")
  objects+=("$obj")
  # Rebuilt when its source or any header is newer (a header's change, a
  # virtual's return type say, must not link against stale objects).
  if [[ ! -f "$obj" || "$src" -nt "$obj" || -n "$(header_newer_than "$obj")" ]]; then
    stale+=("$src")
  fi
done
# The library objects' flags. The third-party headers they include are
# parsed once into a precompiled header with their templates instantiated;
# each source then parses only psrt's code (tools/pch_prelude.sh). Made
# again whenever objects are: a Debian upgrade of a header it holds would
# make clang refuse an old one. (The targets, built with
# -fsanitize=fuzzer, cannot use it.)
objflags="$cflags -fsanitize=fuzzer-no-link"
if ((${#stale[@]} > 0)); then
  tools/pch_prelude.sh "$out/gen" "${sources[@]}" >"$out/prelude.h"
  # shellcheck disable=SC2086
  clang++ $objflags -fpch-instantiate-templates -x c++-header "$out/prelude.h" \
    -o "$out/prelude.h.pch"
fi
objflags="$objflags -include-pch $out/prelude.h.pch"
pids=()
for src in "${stale[@]}"; do
  # shellcheck disable=SC2086
  clang++ $objflags -c "$src" -o "$(object_of "$src")" &
  pids+=($!)
  if ((${#pids[@]} >= $(nproc))); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done

# Links target $1 unless it is newer than its source, every object and
# every header.
build_one() {
  local t=$1 bin="$out/$1"
  if [[ -x "$bin" && "$bin" -nt "tests/fuzz/$t.cc" &&
    -z "$(find "$out/obj" -name '*.o' -newer "$bin" -print -quit)" &&
    -z "$(header_newer_than "$bin")" ]]; then
    return 0
  fi
  # shellcheck disable=SC2086
  clang++ $cflags -fsanitize=fuzzer "tests/fuzz/$t.cc" "${objects[@]}" $libs \
    -o "$bin" > "$out/$t.build.log" 2>&1 || {
    rm -f "$bin"
    echo "fuzz: $t did not build"; cat "$out/$t.build.log"; return 1; }
}

# Each target is linked, then run, on its own core: with nproc cores the
# targets run nproc at a time (CI's 2 cores: 9 targets in 5 rounds).
fuzz_one() {
  local t=$1
  build_one "$t" || return 1
  mkdir -p "$out/corpus/$t"
  echo "fuzz: running $t for $seconds s"
  (cd "$out" && ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1 \
    "./$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2560 \
      -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="crashes/$t-" "corpus/$t" "../../tests/fuzz/corpus/$t" \
      > "$t.log" 2>&1)
}

failed=()
declare -A running=()  # pid -> target
# Reaps the next target to end (bash 5.1's wait -n -p names it).
finish_one() {
  local pid status=0
  wait -n -p pid || status=$?
  local t=${running[$pid]}
  unset "running[$pid]"
  if ((status == 0)); then
    echo "fuzz: $t passed: $(grep -aE "stat::number_of_executed_units" \
      "$out/$t.log" | tail -n 1 | tr -s ' ')"
  else
    failed+=("$t")
    echo "fuzz: $t FAILED; log $out/$t.log, inputs $out/crashes/$t-*"
    tail -n 60 "$out/$t.log" 2>/dev/null || true
  fi
}
for t in "${targets[@]}"; do
  while ((${#running[@]} >= $(nproc))); do finish_one; done
  fuzz_one "$t" &
  running[$!]=$t
done
while ((${#running[@]} > 0)); do finish_one; done
echo "fuzz: ${#targets[@]} targets, ${#failed[@]} failed ${failed[*]:-}"
((${#failed[@]} == 0))
