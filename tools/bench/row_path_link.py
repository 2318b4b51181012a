#!/usr/bin/python3
"""The row path over a link of limited bandwidth: one ps_server and one
ps_worker on two "hosts" (network namespaces, deploy/local/netns.py) whose
link is shaped to --link_mbit by a token bucket (tc tbf) on both ends, so
that the network, not this machine's two cores, is the wall -- as between
real hosts. Each round runs every variant of the worker's row-path options
(--wire_dtype, --row_cache_staleness) in turn, --compute=none (the ceiling)
and optionally the model, and iperf3 measures the shaped link in the same
round: the bytes a step moves are the figure to read against it.

    bazel build //ps_server //ps_worker //tools/ctr_datagen
    /usr/bin/python3 tools/bench/row_path_link.py --link_mbit=1000   # root

Reported per variant: examples/s (median of the rounds), its ratio to the
first variant, and the pull and push wait per step from the worker's last
progress line. --compare_bin_dir runs another build's binaries through the
same variants in the same rounds (it must know their flags).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "local")
)
from deepfm_throughput import BIN, DONE, PROGRESS, ROOT, ensure_data  # noqa: E402
import netns  # noqa: E402

PORT = 2223


def shape(network, mbit):
    """A token bucket of `mbit` on each host's egress: the link's rate."""
    for i in range(network.hosts):
        subprocess.run(
            network.exec_prefix(i)
            + ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f"{mbit}mbit"]
            + ["burst", str(max(64 << 10, mbit * 1000 // 8 // 100)), "latency", "50ms"],
            check=True,
        )


def iperf3_mbit(network, seconds=3):
    """The shaped link's TCP rate from host 2 to host 1, by iperf3."""
    server = subprocess.Popen(
        network.exec_prefix(0) + ["iperf3", "-s", "-1", "-p", "5299"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    out = subprocess.run(
        network.exec_prefix(1)
        + ["iperf3", "-c", network.address(0), "-p", "5299", "-t", str(seconds), "-J"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    server.wait(timeout=30)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def run(network, bin_dir, data_dir, model, batch, steps, flags):
    """One ps_server on host 1, one ps_worker on host 2; returns examples/s
    and the worker's last per-step breakdown."""
    logs = tempfile.mkdtemp(prefix="psrt_link_")
    cluster = {
        "cluster": {
            "ps": [f"{network.address(0)}:{PORT}"],
            "worker": [f"{network.address(1)}:2222"],
        }
    }
    with open(os.path.join(logs, "ps.log"), "w") as ps_log:
        server = subprocess.Popen(
            network.exec_prefix(0)
            + [
                os.path.join(bin_dir, "ps_server/ps_server"),
                f"--cluster={json.dumps(cluster)}",
                "--task_index=0",
                f"--port={PORT}",
                "--metrics_port=0",
            ],
            stdout=ps_log,
            stderr=subprocess.STDOUT,
        )
    try:
        env = dict(os.environ)
        env["TF_CONFIG"] = json.dumps({**cluster, "task": {"type": "worker", "index": 0}})
        out = subprocess.run(
            network.exec_prefix(1)
            + [
                os.path.join(bin_dir, "ps_worker/ps_worker"),
                f"--model={model}",
                f"--train_files={data_dir}/train-*",
                "--epochs=0",
                f"--max_steps={steps}",
                f"--batch_size={batch}",
                "--log_every_steps=20",
                "--device=cpu",
                *flags,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
    finally:
        server.terminate()
        server.wait(timeout=60)
    text = out.stdout + out.stderr
    done = DONE.findall(text)
    if out.returncode != 0 or not done:
        raise RuntimeError(f"worker failed ({out.returncode}); logs in {logs}:\n{text[-2000:]}")
    breakdown = [float(x) for x in PROGRESS.findall(text)[-1]]
    return float(done[-1][3]), dict(zip(["data_ms", "pull_ms", "compute_ms", "push_ms"], breakdown))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--link_mbit", type=int, default=1000)
    p.add_argument("--data_dir", default=os.path.join(ROOT, "out", "bench_ctr_data"))
    p.add_argument("--data_examples", type=int, default=500000)
    p.add_argument("--model", default="deepfm")
    p.add_argument("--batch_size", type=int, default=8192)
    p.add_argument("--examples", type=int, default=400000, help="examples per run")
    p.add_argument("--computes", default="none", help="comma-separated: none, model")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--bin_dir", default=BIN)
    p.add_argument("--compare_bin_dir", default="")
    p.add_argument(
        "--variants",
        default=",--wire_dtype=bf16,--row_cache_staleness=8,"
        "--wire_dtype=bf16 --row_cache_staleness=8",
        help="comma-separated sets of ps_worker flags (space-separated within a set); "
        "the first is the reference",
    )
    args = p.parse_args()
    why = netns.available()
    if why:
        sys.exit(f"row_path_link: {why}")
    ensure_data(args.data_dir, args.data_examples)
    variants = [v.split() for v in args.variants.split(",")]
    steps = max(20, args.examples // args.batch_size)
    builds = {"this": args.bin_dir}
    if args.compare_bin_dir:
        builds["compare"] = args.compare_bin_dir
    network = netns.HostNetwork("psrtlink", 2)
    network.create()
    results, links = {}, []
    try:
        shape(network, args.link_mbit)
        for r in range(args.rounds):
            links.append(iperf3_mbit(network))
            print(f"round {r + 1}: iperf3 over the link {links[-1]:.0f} Mbit/s", flush=True)
            for compute in args.computes.split(","):
                for build, bin_dir in builds.items():
                    for v in variants:
                        flags = [f"--compute={compute}", *v]
                        rate, ms = run(
                            network,
                            bin_dir,
                            args.data_dir,
                            args.model,
                            args.batch_size,
                            steps,
                            flags,
                        )
                        key = (build, compute, " ".join(v))
                        results.setdefault(key, []).append((rate, ms))
                        print(
                            f"round {r + 1} {build} compute={compute} "
                            f"[{' '.join(v) or 'defaults'}]: {rate:.0f} ex/s "
                            + " ".join(f"{k}={x:.2f}" for k, x in ms.items()),
                            flush=True,
                        )
    finally:
        network.destroy()
    print(
        f"\n{args.model}, batch {args.batch_size}, link shaped to {args.link_mbit} Mbit/s "
        f"(iperf3: {statistics.median(links):.0f} Mbit/s), medians of {args.rounds} rounds:"
    )
    summary = []
    for compute in args.computes.split(","):
        first = statistics.median(x[0] for x in results[("this", compute, " ".join(variants[0]))])
        for build in builds:
            for v in variants:
                runs = results[(build, compute, " ".join(v))]
                rate = statistics.median(x[0] for x in runs)
                ms = {k: statistics.median(x[1][k] for x in runs) for k in runs[0][1]}
                line = (
                    f"  {build:8s} compute={compute:5s} {' '.join(v) or 'defaults':45s} "
                    f"{rate:9.0f} ex/s {rate / first:5.2f}x  "
                    f"pull_ms={ms['pull_ms']:.2f} push_ms={ms['push_ms']:.2f}"
                )
                other = results.get(("compare", compute, " ".join(v)))
                if build == "this" and other:
                    line += f"  {rate / statistics.median(x[0] for x in other):.2f}x compare"
                print(line)
                summary.append(
                    {
                        "build": build,
                        "compute": compute,
                        "flags": v,
                        "examples_per_s": rate,
                        "breakdown_ms": ms,
                    }
                )
    print(json.dumps({"link_mbit": args.link_mbit, "iperf3_mbit": links, "results": summary}))


if __name__ == "__main__":
    main()
