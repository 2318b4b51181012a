#!/usr/bin/python3
"""DeepFM on a GPU host: ps_worker --device=gpu against --device=cpu and
against PyTorch on the same GPU, in one run, on the same generated data.

    tools/gpu/run_on_device.sh        (packs nothing; see tools/gpu/README.md)
    python3 tools/bench/gpu_deepfm.py --batch_sizes=1024,8192

Each psrt run is one host (deploy/local/launch.py: one ps_server, one
ps_worker), async, Adagrad embeddings / Adam dense layers, the worker's
throughput from its "done:" line (the whole run, first pulls included).
PyTorch (tools/bench/torch_deepfm.py --device=cuda) trains the same
architecture with the same optimizers and batch, all data resident on the
GPU and no parameter server (its data loading is not timed). Rounds are
interleaved; medians are reported.
"""
import argparse
import json
import os
import statistics
import subprocess

import deepfm_throughput as bench


def gpu_name():
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown GPU"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=os.path.join(bench.ROOT, "out", "gpu_bench_data"))
    p.add_argument("--data_examples", type=int, default=500000)
    p.add_argument("--steps", type=int, default=300, help="steps per run")
    p.add_argument("--batch_sizes", default="1024,8192")
    p.add_argument(
        "--cpu_towers",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="towers (threads) of the --device=cpu worker",
    )
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    bench.ensure_data(args.data_dir, args.data_examples, fmt="libsvm")
    print(f"GPU: {gpu_name()}; {os.cpu_count()} CPU cores", flush=True)
    results = {}
    for r in range(args.rounds):
        for batch in [int(b) for b in args.batch_sizes.split(",")]:
            row = results.setdefault(batch, {"psrt_gpu": [], "psrt_cpu": [], "pytorch_gpu": []})
            common = ["--format=libsvm"]
            rate, gpu_ms = bench.run_psrt(
                1, args.data_dir, args.steps, batch, 0, common + ["--device=gpu"]
            )
            row["psrt_gpu"].append(rate)
            rate, cpu_ms = bench.run_psrt(
                1, args.data_dir, args.steps, batch, args.cpu_towers, common + ["--device=cpu"]
            )
            row["psrt_cpu"].append(rate)
            row["pytorch_gpu"].append(
                bench.run_torch(args.data_dir, args.steps * batch, batch, device="cuda")
            )
            row.setdefault("breakdown_ms", {})["gpu"] = gpu_ms
            row["breakdown_ms"]["cpu"] = cpu_ms
            print(
                f"round {r + 1}/{args.rounds} batch {batch}: "
                + " ".join(f"{k}={v[-1]:.0f}" for k, v in row.items() if k != "breakdown_ms"),
                flush=True,
            )
    summary = {}
    for batch, row in results.items():
        med = {k: statistics.median(v) for k, v in row.items() if k != "breakdown_ms"}
        summary[batch] = med
        print(
            f"\nDeepFM, batch {batch}, {args.steps} steps, median of {args.rounds} "
            f"rounds (examples/s):"
        )
        print(f"  psrt --device=gpu        {med['psrt_gpu']:10.0f}")
        print(
            f"  psrt --device=cpu ({args.cpu_towers:2d} t) {med['psrt_cpu']:10.0f}   "
            f"gpu/cpu = {med['psrt_gpu'] / med['psrt_cpu']:.2f}x"
        )
        print(
            f"  PyTorch on the GPU       {med['pytorch_gpu']:10.0f}   "
            f"psrt gpu/pytorch = {med['psrt_gpu'] / med['pytorch_gpu']:.2f}x"
        )
        for dev, b in row["breakdown_ms"].items():
            print(
                f"  per-step ms, psrt {dev} (last interval): "
                + " ".join(f"{k}={v:.2f}" for k, v in b.items())
            )
    print(
        json.dumps(
            {
                "gpu": gpu_name(),
                "median_examples_per_s": summary,
                "rounds": {b: {k: v for k, v in row.items()} for b, row in results.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
