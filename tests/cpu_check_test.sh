#!/usr/bin/env bash
# A binary of the default build (x86-64-v3, .bazelrc) run on a CPU without
# AVX2 and FMA -- Nehalem, emulated by qemu-user -- or without F16C says
# what it needs and exits 1 instead of dying of SIGILL; on Haswell, the
# first x86-64-v3 CPU, it runs. Needs qemu-user (tools/install_deps.sh installs it).
set -uo pipefail
qemu=$(command -v qemu-x86_64) || {
  echo "FAIL: qemu-x86_64 not found: apt-get install qemu-user (tools/install_deps.sh)"
  exit 1
}
binary=tools/psctl/psctl
failures=0

out=$("$qemu" -cpu Nehalem "$binary" --help 2>&1)
status=$?
if [[ $status -ne 1 || $out != *"built for x86-64-v3 (AVX2, FMA, BMI2, F16C)"*"--config=portable"* ]]; then
  echo "FAIL: on Nehalem: exit $status, output:"
  echo "$out" | head -20
  failures=$((failures + 1))
else
  echo "ok: on Nehalem: exit 1: $out"
fi

# AVX2 and FMA without F16C: the features the compiler's CPU checks know
# least (clang 14's __builtin_cpu_supports has no "f16c"; util/cpu_check.cc
# reads CPUID for it).
out=$("$qemu" -cpu Haswell,-f16c "$binary" --help 2>&1)
status=$?
if [[ $status -ne 1 || $out != *"built for x86-64-v3"* ]]; then
  echo "FAIL: on Haswell without F16C: exit $status, output:"
  echo "$out" | head -20
  failures=$((failures + 1))
else
  echo "ok: on Haswell without F16C: exit 1"
fi

out=$("$qemu" -cpu Haswell "$binary" --help 2>&1)
status=$?
if [[ $out == *"built for x86-64-v3"* || $out != *"psctl"* ]]; then
  echo "FAIL: on Haswell: exit $status, output:"
  echo "$out" | head -20
  failures=$((failures + 1))
else
  echo "ok: on Haswell: psctl --help ran (exit $status)"
fi
echo "$((3 - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
