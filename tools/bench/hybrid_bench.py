#!/usr/bin/python3
"""Hybrid training (ps_worker --dense_sync=allreduce) against the PS, in
one run on this machine:

  1. the all-reduce ring's bytes/s (allreduce_bench: 2 ranks over
     loopback) beside iperf3 on the same loopback, for DeepFM's 412 KB of
     dense gradients and for 4 MiB;
  2. DeepFM on 2 hosts (deploy/local/launch.py), --steps steps of batch
     --batch per worker on planted data, held-out AUC: the dense layers
     through an async PS, through a sync PS, and all-reduced (embeddings
     sync, then async);
  3. an MLP on Fashion-MNIST (every variable dense) on 2 hosts: through an
     async PS, a sync PS, and all-reduced alone (no PS hop but the final
     write), held-out accuracy.

    bazel build //ps_server //ps_worker //tools/ctr_datagen \
        //ps_worker/allreduce:allreduce_bench
    /usr/bin/python3 tools/bench/hybrid_bench.py --rounds=2

Throughput is the sum of the workers' examples/s from their "done:" lines
(the whole run). Cases run --rounds times, interleaved; medians.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepfm_throughput import BIN, DONE, ROOT  # noqa: E402

EVAL = re.compile(r"\] eval examples=\d+ (?:auc=([\d.]+) .*)?accuracy=([\d.]+)")
ALLREDUCE = re.compile(r"dense all-reduce: (\d+) bytes a step, ([\d.]+) ms mean")
BENCH = re.compile(r"bytes=(\d+) mean_ms=([\d.]+) algo_MBps=([\d.]+) bus_MBps=([\d.]+)")
FASHION = "/usr/share/datasets/fashion-mnist"


def iperf3_mbps(seconds=3):
    """Loopback TCP, one stream, as iperf3 measures it (MB/s)."""
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-p", "5399"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(0.5)
    out = subprocess.run(
        ["iperf3", "-c", "127.0.0.1", "-p", "5399", "-t", str(seconds), "-J"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    server.wait(timeout=10)
    bits = float(
        re.search(r'"sum_received":\s*{[^}]*"bits_per_second":\s*([\d.e+]+)', out).group(1)
    )
    return bits / 8 / 1e6


def ring_figures(sizes):
    out = subprocess.run(
        [
            os.path.join(BIN, "ps_worker/allreduce/allreduce_bench"),
            "--ranks=2",
            f"--sizes={','.join(str(s) for s in sizes)}",
            "--iterations=300",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [tuple(float(x) for x in m) for m in BENCH.findall(out)]


def train(hosts, worker_flags, timeout=1800):
    """One launch.py run; per worker: (examples/s, eval auc or None,
    accuracy, all-reduce ms or None)."""
    logs = tempfile.mkdtemp(prefix="psrt_hybrid_")
    subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "deploy/local/launch.py"),
            f"--hosts={hosts}",
            f"--logs={logs}",
            "--base_port=24700",
            f"--bin_dir={BIN}",
            "--",
            os.path.join(BIN, "ps_worker/ps_worker"),
            *worker_flags,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=timeout,
    )
    rows = []
    for w in range(hosts):
        with open(os.path.join(logs, f"worker_{w}.log")) as f:
            text = f.read()
        done = DONE.findall(text)
        if not done:
            raise RuntimeError(f"worker {w} printed no done line; see {logs}")
        ev = EVAL.findall(text)
        ar = ALLREDUCE.findall(text)
        rows.append(
            (
                float(done[-1][3]),
                float(ev[-1][0]) if ev and ev[-1][0] else None,
                float(ev[-1][1]) if ev else None,
                float(ar[-1][1]) if ar else None,
            )
        )
    return rows


def compare(title, cases, base_flags, rounds, metric):
    """Runs every case `rounds` times, interleaved; prints a table with
    the ratios against the first two cases (async PS, sync PS)."""
    results = {name: [] for name, _ in cases}
    for r in range(rounds):
        for name, flags in cases:
            rows = train(2, [*base_flags, *flags])
            results[name].append(rows)
            print(f"  round {r + 1} {name}: {sum(x[0] for x in rows):.0f} examples/s", flush=True)
    med = {
        name: statistics.median(sum(x[0] for x in rows) for rows in runs)
        for name, runs in results.items()
    }
    names = [name for name, _ in cases]
    print(f"\n{title}")
    print(
        f"| case | examples/s (2 workers) | x {names[0]} | x {names[1]} | held-out {metric} "
        "| all-reduce ms/step |"
    )
    print("|---|---|---|---|---|---|")
    for name in names:
        runs = results[name]
        quality = statistics.median(rows[0][1] if metric == "AUC" else rows[0][2] for rows in runs)
        ar = [rows[0][3] for rows in runs if rows[0][3] is not None]
        ar_ms = f"{statistics.median(ar):.2f}" if ar else "-"
        print(
            f"| {name} | {med[name]:.0f} | {med[name] / med[names[0]]:.2f} "
            f"| {med[name] / med[names[1]]:.2f} | {quality:.4f} | {ar_ms} |"
        )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--data_dir", default="/tmp/psrt_hybrid_data")
    p.add_argument("--mnist_steps", type=int, default=2813, help="6 epochs of half at batch 64")
    p.add_argument("--skip", default="", help="comma-separated: ring, deepfm, mnist")
    a = p.parse_args()
    skip = set(a.skip.split(",")) - {""}

    print(f"machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    if "ring" not in skip:
        tcp = iperf3_mbps()
        ring = ring_figures([412008, 4194304])
        tcp_after = iperf3_mbps()
        print("\nall-reduce ring, 2 ranks on loopback, against iperf3 (one stream)")
        print(
            "| bytes | ms | algorithm MB/s | bus MB/s "
            "| iperf3 MB/s (before, after) | bus / iperf3 |"
        )
        print("|---|---|---|---|---|---|")
        for size, ms, algo, bus in ring:
            print(
                f"| {size:.0f} | {ms:.3f} | {algo:.0f} | {bus:.0f} | {tcp:.0f}, {tcp_after:.0f} "
                f"| {bus / max(tcp, tcp_after):.2f} |"
            )

    if "deepfm" not in skip:
        if not os.path.exists(os.path.join(a.data_dir, "planted.json")):
            subprocess.check_call(
                [
                    os.path.join(BIN, "tools/ctr_datagen/ctr_datagen"),
                    f"--output_dir={a.data_dir}",
                    "--train_examples=1000000",
                    "--test_examples=20000",
                    "--format=tfrecord",
                ]
            )
        base = [
            "--model=deepfm",
            f"--train_files={a.data_dir}/train-*",
            f"--eval_files={a.data_dir}/test.tfrecords",
            f"--batch_size={a.batch}",
            "--epochs=0",
            f"--max_steps={a.steps}",
            "--log_every_steps=200",
        ]
        compare(
            f"DeepFM, 2 hosts, {a.steps} steps of {a.batch} per worker",
            [
                ("async PS", ["--mode=async"]),
                ("sync PS", ["--mode=sync"]),
                ("all-reduce, sync embeddings", ["--mode=sync", "--dense_sync=allreduce"]),
                ("all-reduce, async embeddings", ["--mode=async", "--dense_sync=allreduce"]),
            ],
            base,
            a.rounds,
            "AUC",
        )

    if "mnist" not in skip:
        base = [
            "--model=mlp",
            "--classes=10",
            "--format=idx",
            f"--train_files={FASHION}/train-images-idx3-ubyte.gz",
            f"--eval_files={FASHION}/t10k-images-idx3-ubyte.gz",
            "--hidden=256,128",
            "--batch_size=64",
            "--epochs=0",
            f"--max_steps={a.mnist_steps}",
            "--log_every_steps=1000",
        ]
        compare(
            f"MLP on Fashion-MNIST (all dense), 2 hosts, {a.mnist_steps} steps of 64",
            [
                ("async PS", ["--mode=async"]),
                ("sync PS", ["--mode=sync"]),
                ("all-reduce alone", ["--dense_sync=allreduce", "--dense_to_ps_every_steps=0"]),
            ],
            base,
            a.rounds,
            "accuracy",
        )


if __name__ == "__main__":
    main()
