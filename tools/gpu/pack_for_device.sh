#!/bin/bash
# Packs what a GPU host without gRPC, protobuf or Bazel needs to run psrt's
# GPU checks (tools/gpu/run_on_device.sh): the binaries, in bazel-bin's
# layout, and every shared library `ldd` lists for them except the C and C++
# runtimes, which the host has. Output: .devbin/ (keep it out of git).
#
#   tools/gpu/pack_for_device.sh && du -sh .devbin
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(ps_server/ps_server ps_worker/ps_worker tools/ctr_datagen/ctr_datagen
         ps_worker/gpu/gpu_parity_test ps_worker/device_test)
bazel build //ps_server //ps_worker //tools/ctr_datagen //ps_worker/gpu:gpu_parity_test //ps_worker:device_test 2>&1 | tail -1
out=.devbin
rm -rf "$out"
mkdir -p "$out/lib"
libraries_of() {
  ldd "$1" | awk '/=> \// {print $3}' |
    grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux-x86-64)\.so' |
    while read -r lib; do cp -L -n "$lib" "$out/lib/"; done
}
for t in "${targets[@]}"; do
  mkdir -p "$out/$(dirname "$t")"
  cp -L "bazel-bin/$t" "$out/$t"
  libraries_of "bazel-bin/$t"
done
# The data plane dlopens libfabric on first use (dataplane/libfabric.h):
# ldd does not list it, so it and its own libraries go in by name.
fabric=/usr/lib/x86_64-linux-gnu/libfabric.so.1
cp -L -n "$fabric" "$out/lib/"
libraries_of "$fabric"
chmod u+w "$out"/lib/* && strip --strip-unneeded "$out"/lib/* "${targets[@]/#/$out/}"
echo "packed into $out: $(du -sh "$out" | cut -f1), $(ls "$out/lib" | wc -l) libraries"
