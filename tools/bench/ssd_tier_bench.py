#!/usr/bin/env python3
"""The SSD tier through a real PS: pull + push throughput of a hash
embedding on Zipf(1.05) ids, all in memory against a quarter in memory and
the rest in the PS's SSD tier (ps_bench --cases=hash_zipf,hash_zipf_ssd),
measured in the same rounds against the same fresh ps_server, and the
ratio per round.

Expects the binaries built: bazel build -c opt //ps_server //tools/ps_bench
  /usr/bin/python3 tools/bench/ssd_tier_bench.py [--rounds=3] [--seconds=4]
  [--ps_server=PATH ...]  (several: each round runs each, in turn)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from run_benchmarks import BIN, free_port


def one_round(ps_server, ps_bench, seconds, vocab):
    port = free_port()
    with tempfile.TemporaryDirectory() as tier:
        server = subprocess.Popen(
            [
                ps_server,
                f"--port={port}",
                "--bind_address=127.0.0.1",
                "--metrics_port=0",
                f"--ssd_tier_dir={tier}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            cluster = json.dumps({"cluster": {"ps": [f"127.0.0.1:{port}"]}})
            out = subprocess.run(
                [
                    ps_bench,
                    f"--cluster={cluster}",
                    "--cases=hash_zipf,hash_zipf_ssd",
                    "--tcp_baseline=false",
                    "--repeat=1",
                    f"--seconds={seconds}",
                    f"--vocab={vocab}",
                    "--json",
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            ).stdout
        finally:
            server.terminate()
            server.wait()
    results = {}
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["case"]] = r
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--vocab", type=int, default=1000000)
    parser.add_argument(
        "--ps_server",
        action="append",
        help="ps_server binaries to compare (default: bazel-bin's)",
    )
    parser.add_argument("--ps_bench", default=os.path.join(BIN, "tools/ps_bench/ps_bench"))
    args = parser.parse_args()
    servers = args.ps_server or [os.path.join(BIN, "ps_server/ps_server")]
    for path in servers + [args.ps_bench]:
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} is not built: bazel build -c opt //ps_server //tools/ps_bench")
    ratios = {s: [] for s in servers}
    print(
        f"{'round':<6}{'ps_server':<40}{'memory ops/s':>13}{'tier ops/s':>12}"
        f"{'ratio':>7}{'tier p99 ms':>12}",
        flush=True,
    )
    for round_number in range(1, args.rounds + 1):
        for server in servers:
            started = time.time()
            r = one_round(server, args.ps_bench, args.seconds, args.vocab)
            memory, tier = r["hash_zipf"], r["hash_zipf_ssd"]
            ratio = tier["ops_per_s"] / memory["ops_per_s"]
            ratios[server].append(ratio)
            print(
                f"{round_number:<6}{server[-39:]:<40}{memory['ops_per_s']:>13.1f}"
                f"{tier['ops_per_s']:>12.1f}{ratio:>7.2f}{tier['p99_ms']:>12.2f}"
                f"   ({time.time() - started:.0f} s; memory p99 "
                f"{memory['p99_ms']:.2f} ms, {memory['rows_per_s'] / 1e6:.2f}M"
                f" rows/s)",
                flush=True,
            )
    for server, values in ratios.items():
        print(
            f"median ratio {statistics.median(values):.2f}x "
            f"(rounds {', '.join(f'{v:.2f}' for v in values)}): {server}"
        )


if __name__ == "__main__":
    main()
