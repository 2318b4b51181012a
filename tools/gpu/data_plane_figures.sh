#!/bin/bash
# Issue 41's figures on a bigger host (the device machine: 16 cores, a GPU)
# with the binaries tools/gpu/pack_for_device.sh packs into .devbin/, plus
# .devbin/tools/ps_bench/ps_bench, .devbin/pslite_bench (the driver
# tools/bench/pslite_compare.py builds from a ps-lite checkout) and
# .devbin/iperf3, with the libraries `ldd` lists for them:
#   1. psrt over its data plane and over gRPC against ps-lite, interleaved
#      (tools/bench/pslite_compare.py);
#   2. DeepFM on 2 hosts, --data_plane=fabric against grpc, with 1 host and
#      PyTorch beside them (tools/bench/deepfm_throughput.py);
#   3. the GPU worker at batch 8,192 over each, against PyTorch on the same
#      GPU (tools/bench/gpu_deepfm.py), when a GPU is present.
# Logs go to $OUT when set, else out/data_plane.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=$PWD/.devbin
logs=${OUT:-$PWD/out/data_plane}
mkdir -p "$logs"
cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null ||
         find / -name libcublas.so.13 -not -path '/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$bin/lib${cublas:+:$(dirname "$cublas")}
export PSRT_BIN_DIR=$bin PATH=$bin:$PATH
nproc; (nvidia-smi -L || true) 2>&1 | head -2
python3 tools/bench/pslite_compare.py --pslite_driver="$bin/pslite_bench" \
  --rounds="${ROUNDS:-3}" --seconds=2 2>&1 | grep -v "^round" |
  tee "$logs/pslite_compare.log"
python3 tools/bench/deepfm_throughput.py --rounds="${ROUNDS:-3}" --steps=300 \
  --torch_threads=probe 2>&1 | tee "$logs/deepfm_2_hosts.log"
if nvidia-smi -L >/dev/null 2>&1; then
  python3 tools/bench/gpu_deepfm.py --batch_sizes=8192 --rounds=1 --steps=200 \
    --gpu_variants=default \
    --variant="default_fabric=--data_plane=fabric" 2>&1 |
    tee "$logs/gpu_deepfm.log"
fi
