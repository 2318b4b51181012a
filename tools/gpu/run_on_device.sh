#!/bin/bash
# Runs psrt's GPU checks on a GPU host that has a CUDA driver and PyTorch but
# no gRPC or Bazel, with the binaries tools/gpu/pack_for_device.sh packed
# into .devbin/ on the build machine:
#   1. the GPU parity test (GPU towers vs Model::Compute, loss curve) and
#      the device-selection test;
#   2. end to end: ps_worker --device=gpu (1 tower per GPU, then 2 towers
#      per GPU) and --device=cpu (8 towers), one host each, same data and
#      seed: their loss lines one after another;
#   3. tools/bench/gpu_deepfm.py (arguments are passed to it; SKIP_BENCH=1
#      skips it; ONLY_BENCH=1 skips 1 and 2).
# Logs go to $OUT when set (the device tool's output folder), else out/gpu.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bin=$root/.devbin
logs=${OUT:-$root/out/gpu}
mkdir -p "$logs"
# cuBLAS 13 from the CUDA toolkit or PyTorch's nvidia wheels.
cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null ||
         find / -name libcublas.so.13 -not -path '/proc/*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$bin/lib${cublas:+:$(dirname "$cublas")}
export PSRT_BIN_DIR=$bin
nvidia-smi -L
echo "cuBLAS: ${cublas:-not found}"

[ -n "${ONLY_BENCH:-}" ] || "$bin/ps_worker/gpu/gpu_parity_test" 2>&1 | tee "$logs/gpu_parity_test.log"
[ -n "${ONLY_BENCH:-}" ] || "$bin/ps_worker/device_test" 2>&1 | tee "$logs/device_test.log"

data=$root/out/gpu_bench_data
[ -f "$data/planted.json" ] || "$bin/tools/ctr_datagen/ctr_datagen" \
  --output_dir="$data" --train_examples=500000 --test_examples=10000 \
  --format=libsvm >/dev/null
gpus=$(nvidia-smi -L | wc -l)
runs="gpu:0 gpu:$((2 * gpus)) cpu:8"
[ -n "${ONLY_BENCH:-}" ] && runs=""
for run in $runs; do
  device=${run%:*} towers=${run#*:}
  python3 deploy/local/launch.py --hosts=1 --logs="$logs/e2e_${device}_$towers" \
    --bin_dir="$bin" --base_port=25000 -- "$bin/ps_worker/ps_worker" \
    --model=deepfm --format=libsvm --train_files="$data/train-*" \
    --eval_files="$data/test.libsvm" --shuffle_buffer=0 --max_steps=400 \
    --batch_size=2048 --log_every_steps=50 --device=$device \
    --towers=$towers >/dev/null 2>&1
  echo "== --device=$device --towers=$towers"
  grep -E "computing on|step=|eval |done:" \
    "$logs/e2e_${device}_$towers/worker_0.log" |
    sed -E 's/^.*(computing on|step=|eval |done:)/\1/'
done 2>&1 | tee "$logs/e2e.log"

[ -n "${SKIP_BENCH:-}" ] && exit 0
python3 tools/bench/gpu_deepfm.py --data_dir="$data" "$@" 2>&1 |
  tee "$logs/gpu_deepfm.log"
