#!/usr/bin/python3
"""Measures psrt (ps_bench against a fresh local ps_server) and the
torch.distributed.rpc baseline on the same cases, and prints psrt's figures
with their ratios to raw TCP and to torch RPC.

The machine may be shared and noisy (throughput here swings by tens of
percent from one minute to the next), so every comparison is paired: for
each case, operation and in-flight count, a psrt measurement (which carries
its own raw TCP baseline) and a torch measurement are taken back to back,
--pairs times, and the medians of the per-pair ratios are reported.

    /usr/bin/python3 tools/bench/run_benchmarks.py [--inflight 1,2] [--quick]

Expects the binaries built (bazel build //ps_server //tools/ps_bench).
Results: out/bench/results.jsonl, log: out/bench/run.log.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("PSRT_BIN_DIR", os.path.join(ROOT, "bazel-bin"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, log):
    log.write("+ " + " ".join(cmd) + "\n")
    log.flush()
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write(result.stdout)
    if result.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{result.stdout[-3000:]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inflight", default="1,2")
    parser.add_argument("--cases", default="dense_4MiB,dense_64MiB,embedding_100k")
    parser.add_argument("--ops", default="push,pull")
    parser.add_argument("--seconds", default="2")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 s, 1 pair")
    parser.add_argument("--no_torch", action="store_true")
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "bench"))
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.pairs = "1", 1
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "run.log"), "w")

    port = free_port()
    server = subprocess.Popen(
        [
            os.path.join(BIN, "ps_server/ps_server"),
            f"--port={port}",
            "--bind_address=127.0.0.1",
            "--metrics_port=0",
        ],
        stdout=log,
        stderr=log,
    )
    cluster = json.dumps({"cluster": {"ps": [f"127.0.0.1:{port}"]}})
    rows = []
    print(
        f"{'case':<15}{'op':<5}{'inflight':>8} {'system':<11}{'GB/s':>7}"
        f"{'Mrows/s':>9}{'x TCP':>7}{'x torch':>8}",
        flush=True,
    )
    try:
        time.sleep(1)
        for inflight in args.inflight.split(","):
            for case in args.cases.split(","):
                for op in args.ops.split(","):
                    systems = ["psrt"]
                    if case.startswith("embedding"):
                        systems.append("psrt-unique")
                    samples = {s: [] for s in systems + ["torch"]}
                    for _ in range(args.pairs):
                        common = [
                            f"--cases={case}",
                            f"--ops={op}",
                            f"--seconds={args.seconds}",
                            "--repeat=1",
                            f"--inflight={inflight}",
                            "--json",
                        ]
                        for system in systems:
                            unique = "true" if system == "psrt-unique" else "false"
                            samples[system] += run(
                                [
                                    os.path.join(BIN, "tools/ps_bench/ps_bench"),
                                    f"--cluster={cluster}",
                                    f"--ids_unique={unique}",
                                ]
                                + common,
                                log,
                            )
                        if not args.no_torch:
                            samples["torch"] += run(
                                [
                                    "/usr/bin/python3",
                                    os.path.join(ROOT, "tools/bench/torch_rpc_baseline.py"),
                                    f"--port={free_port()}",
                                ]
                                + common,
                                log,
                            )
                    torch = samples["torch"]
                    for system in systems:
                        ours = samples[system]

                        def med(key, rs=ours):
                            return statistics.median(r[key] for r in rs)

                        vs_torch = (
                            statistics.median(
                                o["ops_per_s"] / t["ops_per_s"] for o, t in zip(ours, torch)
                            )
                            if torch
                            else None
                        )
                        row = {
                            "case": case,
                            "op": op,
                            "inflight": int(inflight),
                            "system": system,
                            "gbytes_per_s": med("gbytes_per_s"),
                            "rows_per_s": med("rows_per_s"),
                            "ratio_to_tcp": med("ratio_to_tcp"),
                            "tcp_gbytes_per_s": med("tcp_gbytes_per_s"),
                            "ratio_to_torch": vs_torch,
                            "torch_gbytes_per_s": statistics.median(
                                t["gbytes_per_s"] for t in torch
                            )
                            if torch
                            else None,
                            "pairs": args.pairs,
                        }
                        rows.append(row)
                        mrows = f"{row['rows_per_s'] / 1e6:.2f}" if row["rows_per_s"] else "-"
                        vt = f"{vs_torch:.2f}" if vs_torch else "-"
                        print(
                            f"{case:<15}{op:<5}{inflight:>8} {system:<11}"
                            f"{row['gbytes_per_s']:>7.3f}{mrows:>9}"
                            f"{row['ratio_to_tcp']:>7.2f}{vt:>8}",
                            flush=True,
                        )
    finally:
        server.terminate()
        server.wait()
    with open(os.path.join(args.out, "results.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
