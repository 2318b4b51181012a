#!/usr/bin/python3
"""DeepFM training throughput: psrt with 1 and 2 hosts against a
single-process PyTorch DeepFM, on the same generated data, in one run.

    bazel build //ps_server //ps_worker //tools/ctr_datagen
    /usr/bin/python3 tools/bench/deepfm_throughput.py --steps=300

Each psrt run is a local cluster (deploy/local/launch.py): one ps_server and
one ps_worker per host, async, batch 1024 per worker. Throughput is the sum
of the workers' examples/s (from each worker's "done:" line, which covers
the whole run including its first pulls). The per-step breakdown is the mean
of the workers' last progress lines. PyTorch trains the same architecture
with the same optimizers and batch on the same examples, tuned as a
performance-minded user would (tools/bench/torch_deepfm.py: unique rows
gathered once per step, Adagrad on touched rows only, the MLP through
oneDNN, the fastest thread count; its data loading is not timed, psrt's
is). Every system's test AUC on the held-out file is printed beside its
throughput. --one_host_modes adds 1-host runs in other consistency modes
(sync: a step reads the parameters the previous step wrote, as PyTorch's
loop does, at the price of the pull waiting for that update). Runs are
repeated --rounds times, interleaved, and the median is reported.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("PSRT_BIN_DIR", os.path.join(ROOT, "bazel-bin"))
DONE = re.compile(r"done: steps=(\d+) examples=(\d+) seconds=([\d.]+) examples/s=([\d.]+)")
EVAL_AUC = re.compile(r"\] eval examples=\d+ auc=([\d.]+)")
PROGRESS = re.compile(r"data_ms=([\d.]+) pull_ms=([\d.]+) compute_ms=([\d.]+) push_ms=([\d.]+)")
INTERVAL_RATE = re.compile(r"\] step=\d+ epoch=\d+ examples=\d+ examples/s=([\d.]+)")


def test_file(data_dir):
    """The held-out file ctr_datagen wrote (TFRecord or LibSVM)."""
    libsvm = os.path.join(data_dir, "test.libsvm")
    return libsvm if os.path.exists(libsvm) else os.path.join(data_dir, "test.tfrecords")


def ensure_data(data_dir, examples, fmt="tfrecord"):
    if os.path.exists(os.path.join(data_dir, "planted.json")):
        return
    subprocess.check_call(
        [
            os.path.join(BIN, "tools/ctr_datagen/ctr_datagen"),
            f"--output_dir={data_dir}",
            f"--train_examples={examples}",
            "--test_examples=10000",
            f"--format={fmt}",
        ]
    )


def run_psrt(
    hosts,
    data_dir,
    steps,
    batch,
    towers,
    worker_flags=(),
    model="deepfm",
    bin_dir=BIN,
    evaluate=False,
):
    """Trains on a local cluster of `hosts` (binaries from `bin_dir`); returns
    the workers' summed examples/s and their mean per-step breakdown (ms),
    plus "auc" (worker 0's on the held-out test file) with `evaluate`."""
    if evaluate:
        worker_flags = (*worker_flags, f"--eval_files={test_file(data_dir)}")
    # PSRT_BENCH_LOG_DIR: keep the cluster's logs there (else a temp dir).
    logs = tempfile.mkdtemp(
        prefix=f"psrt_bench_{hosts}h_", dir=os.environ.get("PSRT_BENCH_LOG_DIR") or None
    )
    cmd = [
        sys.executable,
        os.path.join(ROOT, "deploy/local/launch.py"),
        f"--hosts={hosts}",
        f"--logs={logs}",
        "--base_port=24000",
        f"--bin_dir={bin_dir}",
        # A worker asking for the data plane gets PS that serve it.
        *(["--ps_flag=--data_plane=fabric"] if "--data_plane=fabric" in worker_flags else []),
        "--",
        os.path.join(bin_dir, "ps_worker/ps_worker"),
        f"--model={model}",
        f"--train_files={data_dir}/train-*",
        "--epochs=0",
        f"--max_steps={steps}",
        f"--batch_size={batch}",
        f"--towers={towers}",
        "--log_every_steps=50",
        *worker_flags,
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    total, breakdowns, rates = 0.0, [], []
    for w in range(hosts):
        with open(os.path.join(logs, f"worker_{w}.log")) as f:
            text = f.read()
        done = DONE.findall(text)
        if not done:
            raise RuntimeError(f"worker {w} printed no done line; see {logs}")
        total += float(done[-1][3])
        breakdowns.append([float(x) for x in PROGRESS.findall(text)[-1]])
        rates.append(float(INTERVAL_RATE.findall(text)[-1]))
    mean = [statistics.mean(col) for col in zip(*breakdowns)]
    result = dict(zip(["data_ms", "pull_ms", "compute_ms", "push_ms"], mean))
    # The summed examples/s of the workers' last progress intervals (the
    # steady state, without start-up and the first epoch's row creation).
    result["last_interval_examples_per_s"] = sum(rates)
    if evaluate:
        with open(os.path.join(logs, "worker_0.log")) as f:
            aucs = EVAL_AUC.findall(f.read())
        if not aucs:
            raise RuntimeError(f"worker 0 printed no eval line; see {logs}")
        result["auc"] = float(aucs[-1])
    return total, result


def run_torch_report(data_dir, examples, batch, device="cpu", evaluate=False, threads=0, extra=()):
    """torch_deepfm.py's JSON report: examples_per_s, threads, test_auc, ...
    `threads` 0: the thread count torch_deepfm.py measures fastest; `extra`:
    more torch_deepfm.py flags."""
    test = [f"--test={test_file(data_dir)}"] if evaluate else []
    test += list(extra)
    if threads:
        test.append(f"--threads={threads}")
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools/bench/torch_deepfm.py"),
            f"--train={data_dir}/train-*",
            f"--max_examples={examples}",
            f"--batch_size={batch}",
            f"--device={device}",
            "--json",
            *test,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_torch(data_dir, examples, batch, device="cpu"):
    return run_torch_report(data_dir, examples, batch, device)["examples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=os.path.join(ROOT, "out", "bench_ctr_data"))
    p.add_argument("--data_examples", type=int, default=500000)
    p.add_argument("--steps", type=int, default=300, help="steps per psrt worker")
    p.add_argument("--batch_size", type=int, default=1024)
    p.add_argument("--towers", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--torch_threads",
        default="each",
        choices=["each", "probe"],
        help="each: PyTorch run with every thread count 1..cores, the fastest kept; "
        "probe: torch_deepfm.py's own short probe picks one",
    )
    p.add_argument(
        "--one_host_modes",
        default="async",
        help="comma-separated ps_worker --mode values for the 1-host runs",
    )
    p.add_argument(
        "--two_host_data_planes",
        default="fabric,grpc",
        help="ps_worker --data_plane values of the 2-host runs (psrt_2_hosts is the first)",
    )
    args = p.parse_args()
    ensure_data(args.data_dir, args.data_examples)
    planes = args.two_host_data_planes.split(",")
    two_host = {d: "psrt_2_hosts" if i == 0 else f"psrt_2_hosts_{d}" for i, d in enumerate(planes)}
    modes = args.one_host_modes.split(",")
    one_host = {m: "psrt_1_host" if m == "async" else f"psrt_1_host_{m}" for m in modes}
    results = {k: [] for k in one_host.values()}
    results.update({k: [] for k in two_host.values()})
    results["pytorch"] = []
    aucs = {k: [] for k in results}
    steps_of = {}
    torch_threads = []
    for r in range(args.rounds):
        for mode, key in one_host.items():
            rate, steps_of[key] = run_psrt(
                1,
                args.data_dir,
                args.steps,
                args.batch_size,
                args.towers,
                worker_flags=(f"--mode={mode}",),
                evaluate=True,
            )
            results[key].append(rate)
            aucs[key].append(steps_of[key].pop("auc"))
        for plane, key in two_host.items():
            rate, steps_of[key] = run_psrt(
                2,
                args.data_dir,
                args.steps,
                args.batch_size,
                args.towers,
                worker_flags=(f"--data_plane={plane}",),
                evaluate=True,
            )
            results[key].append(rate)
            aucs[key].append(steps_of[key].pop("auc"))
        # The baseline at its fastest: each thread count run in full (a short
        # probe picks 1 or 2 by noise here), the fastest kept.
        counts = range(1, (os.cpu_count() or 1) + 1) if args.torch_threads == "each" else [0]
        report = max(
            (
                run_torch_report(
                    args.data_dir,
                    args.steps * args.batch_size,
                    args.batch_size,
                    evaluate=True,
                    threads=t,
                )
                for t in counts
            ),
            key=lambda r: r["examples_per_s"],
        )
        results["pytorch"].append(report["examples_per_s"])
        aucs["pytorch"].append(report["test_auc"])
        torch_threads.append(report["threads"])
        print(
            f"round {r + 1}/{args.rounds}: "
            + " ".join(f"{k}={v[-1]:.0f} (auc {aucs[k][-1]:.4f})" for k, v in results.items())
            + f"; pytorch threads={report['threads']}",
            flush=True,
        )
    med = {k: statistics.median(v) for k, v in results.items()}
    print(
        f"\nDeepFM, batch {args.batch_size}, {args.steps} steps per worker, "
        f"median of {args.rounds} rounds (examples/s; test AUC):"
    )
    for k, v in med.items():
        print(
            f"  {k:18s} {v:10.0f}   {v / med['pytorch']:.2f}x pytorch   "
            f"auc {statistics.median(aucs[k]):.4f}"
        )
    first = one_host[modes[0]]
    print(f"  2 hosts / 1 host ({modes[0]}): {med['psrt_2_hosts'] / med[first]:.2f}x")
    for plane, key in list(two_host.items())[1:]:
        print(f"  2 hosts, {planes[0]} / {plane}: {med['psrt_2_hosts'] / med[key]:.2f}x")
    for hosts, b in sorted(steps_of.items(), key=str):
        print(
            f"  per-step ms, {hosts} (last interval): "
            + " ".join(f"{k}={v:.2f}" for k, v in b.items())
        )
    print(
        json.dumps(
            {
                "median_examples_per_s": med,
                "rounds": results,
                "test_auc": aucs,
                "pytorch_threads": torch_threads,
                "breakdown_ms": {str(h): b for h, b in steps_of.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
