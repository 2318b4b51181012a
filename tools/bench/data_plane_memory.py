#!/usr/bin/python3
"""What the data plane costs in resident memory, PS and worker, against gRPC.

    bazel build //ps_server //tools/ps_bench
    /usr/bin/python3 tools/bench/data_plane_memory.py [--rounds=2] \\
        [--variants=FI_OFI_RXM_BUFFER_SIZE=8192,FI_OFI_RXM_BUFFER_SIZE=1024]

Each round, for each variant (environment settings given to every process,
';' between several; "" for none) in turn, starts 3 ps_server on 127.0.0.1-3
(a host each, as --replicas needs) over gRPC with --replicas=1, then over the
data plane with --replicas=1, 2 and 3, and prints each PS's VmRSS 3 s after
start (idle: the endpoints its forwards leave from are open), ps_bench's peak
RSS pushing and pulling 4 MiB to all 3 PS with 1 and with 8 operations in
flight (a data-plane connection per PS and operation), its GB/s, and each
PS's VmRSS after the bench. The baseline is the gRPC cluster in the same
round; a variant's own comparison is the other variants in the same round.
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replication_bench import ps_bench_command, start_cluster, stop_cluster  # noqa: E402
from run_benchmarks import run  # noqa: E402


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def bench(spec, plane, inflight, log):
    """ps_bench's peak RSS (MiB) and its push and pull GB/s."""
    with tempfile.NamedTemporaryFile("r") as peak:
        results = run(
            ["/usr/bin/time", "-f", "%M", "-o", peak.name]
            + ps_bench_command(spec, "dense_4MiB", "push,pull", 1, inflight, plane),
            log,
        )
        peak_kib = int(peak.read().split()[-1])
    rates = [f"{r['gbytes_per_s']:.3f}" for r in results]
    return peak_kib / 1024.0, rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--variants",
        default="",
        help="comma-separated environment settings to compare, each "
        "NAME=VALUE[;NAME=VALUE...]; empty: the defaults only",
    )
    args = parser.parse_args()
    variants = args.variants.split(",")
    log = open(os.devnull, "w")
    base_env = dict(os.environ)
    for rnd in range(1, args.rounds + 1):
        for variant in variants:
            os.environ.clear()
            os.environ.update(base_env)
            for setting in filter(None, variant.split(";")):
                name, value = setting.split("=", 1)
                os.environ[name] = value
            for plane, replicas in (
                ("grpc", 1),
                ("fabric", 1),
                ("fabric", 2),
                ("fabric", 3),
            ):
                spec, procs = start_cluster(replicas, log, 3, plane)
                try:
                    time.sleep(3)
                    idle = [rss_mib(p.pid) for p in procs]
                    one = bench(spec, plane, 1, log)
                    eight = bench(spec, plane, 8, log)
                    after = [rss_mib(p.pid) for p in procs]
                finally:
                    stop_cluster(procs)
                print(
                    f"round {rnd} [{variant or 'defaults'}] {plane} "
                    f"R={replicas}: PS idle "
                    + " ".join(f"{x:.1f}" for x in idle)
                    + " MiB, after "
                    + " ".join(f"{x:.1f}" for x in after)
                    + f" MiB; ps_bench 1 in flight {one[0]:.1f} MiB "
                    f"(push, pull {', '.join(one[1])} GB/s), 8 in flight "
                    f"{eight[0]:.1f} MiB ({', '.join(eight[1])} GB/s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
