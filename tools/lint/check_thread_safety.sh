#!/usr/bin/env bash
# Compiles every C++ source of psrt with clang's thread-safety analysis
# (-Wthread-safety, as errors), so the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED
# annotations are checked rather than documentation: GCC, which builds psrt,
# ignores them. Syntax and analysis only (-fsyntax-only): nothing is linked.
#
#   tools/lint/check_thread_safety.sh            every source a finding can
#                                                come from, 2 at a time
#   tools/lint/check_thread_safety.sh FILE.cc... only those
#   tools/lint/check_thread_safety.sh --except LIST
#                                                every source a finding can
#                                                come from but those named
#                                                in the file LIST (./run.sh
#                                                test: the ASan pass, built
#                                                by clang, analyzes those)
#
# Exits non-zero naming each file with a finding.
set -euo pipefail
cd "$(dirname "$0")/../.."
except_list=""
if [[ ${1:-} == --except ]]; then
  except_list=${2:?--except needs a file listing sources}
  shift 2
fi
out=out/thread_safety
mkdir -p "$out/gen"
modules="grpc++ protobuf libglog libcurl libcrypto zlib absl_status absl_statusor
  absl_strings absl_str_format absl_synchronization absl_time absl_flat_hash_map
  absl_flat_hash_set absl_hash absl_random_random gtest gmock benchmark civetweb
  python3"
present=""
for m in $modules; do
  if pkg-config --exists "$m"; then present="$present $m"; fi
done
protoc -I. --cpp_out="$out/gen" --grpc_out="$out/gen" \
  --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" proto/ps.proto
protoc -I. --cpp_out="$out/gen" proto/tf_example.proto proto/tf_event.proto
# shellcheck disable=SC2086
flags="-std=c++17 -fsyntax-only -Wthread-safety -Werror=thread-safety
  -I. -I$out/gen $(pkg-config --cflags $present eigen3)"
if (($# > 0)); then
  files=("$@")
else
  # Every C++ source but the CUDA-only host file (needs the toolkit's
  # headers), the ps-lite benchmark driver (needs a ps-lite checkout) and
  # the generated protos.
  mapfile -t all_files < <(git ls-files '*.cc' | grep -v '^third_party/' |
    grep -v '^ps_worker/gpu/cublas_library.cc$' |
    grep -v '^tools/bench/pslite/')
  # Only those a finding can come from: a mutex, lock or annotation named
  # in the source or in a psrt header it includes (thread_safety_sources.py
  # says why the rest cannot have one); parsing them all took half of the
  # lint stage.
  mapfile -t files < <(python3 tools/lint/thread_safety_sources.py "${all_files[@]}")
  skipped=$((${#all_files[@]} - ${#files[@]}))
  if [[ -n $except_list ]]; then
    mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -vxF -f "$except_list")
    analyzed_elsewhere=$((${#all_files[@]} - skipped - ${#files[@]}))
  fi
fi
if ((${#files[@]} == 0)); then
  echo "thread-safety: no sources to check"
  exit 0
fi
# The third-party headers every source includes, parsed once into a
# precompiled header with their templates instantiated: each source then
# parses only psrt's own code, where every finding is (the whole check
# 239 s -> 112 s on 2 cores; docs/benchmarks.md, "CI's stages").
prelude="$out/prelude.h"
tools/pch_prelude.sh "$out/gen" "${files[@]}" >"$prelude"
# shellcheck disable=SC2086
clang++ ${flags/-fsyntax-only/} -fpch-instantiate-templates -x c++-header \
  "$prelude" -o "$prelude.pch"
flags="$flags -include-pch $prelude.pch"
failed="$out/failed"
: >"$failed"
check() {
  local f=$1 log
  log="$out/$(echo "$f" | tr / _).log"
  # shellcheck disable=SC2086
  if ! clang++ $flags "$f" >"$log" 2>&1; then
    echo "$f" >>"$failed"
    cat "$log" >&2
  fi
}
export -f check
export flags out failed
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} bash -c 'check {}'
if [[ -s "$failed" ]]; then
  echo "thread-safety: findings (or compile errors) in:" >&2
  sed 's/^/  /' "$failed" >&2
  exit 1
fi
echo "thread-safety: ${#files[@]} sources checked, no findings${skipped:+ ($skipped with no mutex, lock or annotation in reach not parsed)}${analyzed_elsewhere:+; $analyzed_elsewhere more named in $except_list, checked elsewhere}"
