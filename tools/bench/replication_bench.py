#!/usr/bin/python3
"""What --replicas=2 costs pushes, and how long a failover takes.

    bazel build //ps_server //tools/ps_bench //tests:replication_test
    /usr/bin/python3 tools/bench/replication_bench.py [--rounds=3] \\
        [--seconds=3] [--inflight=4] [--kills=5] [--rejoins=3] \\
        [--data_planes=grpc,fabric]

Each round starts 3 ps_server (--num_ps=2: 2) on 127.0.0.1, 127.0.0.2 and
127.0.0.3 (a host each, as --replicas needs) twice, with --replicas=1 and with
--replicas=2 (alternating which goes first), and runs ps_bench's push
cases against each (dense 4 MiB, embedding 100k rows; --inflight pushes in
flight), reporting push ops/s and p50 / p99 latency. The baseline is the
same cluster without replicas in the same round: R=2 adds a forward of
every push to the next PS and its apply there before the acknowledgement.
Medians over rounds; targets (issue 15): throughput >= 0.6x, p99 <= 2x.
With --data_planes=grpc,fabric both run in each round, in alternating
order: with fabric the pushes and the forwards to the backups ride the
data plane.

Failover: runs tests/replication_test's kill -9 case --kills times and
reports the median of "first push started after kill -9 acknowledged N ms
after it" (4 clients pushing; the backup takes over after 3 s without an
answer from the primary and a majority vote).

Rejoin: runs its restart-after-failover case --rejoins times (3 clients
pushing; a 128 MiB table, with its Adagrad slot, among the shards) and reports the time from the
restart to "rejoined as a backup" and the copy's size and rate; then the
handback that follows: how long the shards were served by neither PS (the
serving PS's log), the slowest push after it beside the median push before
it, and -- what a client sees as the handback's pause -- the window from
the serving PS's demote to its settle (the new primary serves, the held
refusals are answered) with the slowest push in flight across it, beside
the slowest push of the 1.5 s before the kill (the same clients, nothing
happening).
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

from run_benchmarks import BIN, free_port, run


def start_cluster(replicas, log, num_ps=3, data_plane="grpc"):
    ports = [free_port() for _ in range(num_ps)]
    hosts = [f"127.0.0.{i + 1}" for i in range(num_ps)]
    spec = {"cluster": {"ps": [f"{h}:{p}" for h, p in zip(hosts, ports)]}}
    if num_ps == 2:
        # 2 PS vote with the workers: with one worker in the spec the two PS
        # are 2 of the 3 voters and grant each other their leases (ps_bench
        # is no witness), as a 2-host job's PS do while its workers run.
        spec["cluster"]["worker"] = ["127.0.0.1:1"]
    procs = []
    for i in range(num_ps):
        procs.append(
            subprocess.Popen(
                [
                    os.path.join(BIN, "ps_server", "ps_server"),
                    "--cluster=" + json.dumps(spec),
                    f"--task_index={i}",
                    f"--bind_address={hosts[i]}",
                    "--metrics_port=0",
                    f"--replicas={replicas}",
                    f"--data_plane={data_plane}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    time.sleep(1.0)
    return spec, procs


def stop_cluster(procs):
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def ps_bench_command(spec, cases, ops, seconds, inflight, data_plane):
    """ps_bench against the cluster `spec`: one measurement per case and
    operation, JSON lines, no TCP baseline (the clusters compared are)."""
    return [
        os.path.join(BIN, "tools", "ps_bench", "ps_bench"),
        "--cluster=" + json.dumps(spec),
        f"--cases={cases}",
        f"--ops={ops}",
        "--json",
        "--tcp_baseline=false",
        "--repeat=1",
        f"--seconds={seconds}",
        f"--inflight={inflight}",
        f"--data_plane={data_plane}",
    ]


def bench(spec, args, log, data_plane="grpc"):
    cmd = ps_bench_command(
        spec, "dense_4MiB,embedding_100k", "push", args.seconds, args.inflight, data_plane
    )
    return {r["case"]: r for r in run(cmd, log)}


def test_runs(case, pattern, n, log):
    """Runs tests/replication_test's `case` n times; the groups of `pattern`
    in each run's output."""
    binary = os.path.join(BIN, "tests", "replication_test")
    found = []
    for i in range(n):
        out = subprocess.run(
            [binary, f"--gtest_filter=*{case}*"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=os.path.join(BIN, "tests", "replication_test.runfiles", "psrt"),
        )
        log.write(out.stdout)
        match = re.search(pattern, out.stdout)
        if out.returncode != 0 or not match:
            sys.exit(f"{case} run {i + 1}: replication_test failed:\n{out.stdout[-3000:]}")
        found.append(match.groups())
    return found


def seconds(duration):
    """absl::FormatDuration's "1.37s" / "253.8ms" / "613.2us" in seconds."""
    value = re.match(r"([\d.]+)(us|ms|s)$", duration)
    return float(value.group(1)) / {"us": 1e6, "ms": 1e3, "s": 1}[value.group(2)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_ps", type=int, default=3, choices=(2, 3))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--inflight", type=int, default=4)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--rejoins", type=int, default=3)
    parser.add_argument(
        "--data_planes",
        default="grpc",
        help="comma-separated: grpc, fabric (PS and ps_bench; with fabric "
        "the R=2 forward rides the backups' data plane too), interleaved",
    )
    parser.add_argument("--log", default="/tmp/replication_bench.log")
    args = parser.parse_args()
    planes = args.data_planes.split(",")
    results = {(p, r): [] for p in planes for r in (1, 2)}
    with open(args.log, "w") as log:
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            for plane in planes if r % 2 == 0 else planes[::-1]:
                for replicas in order:
                    spec, procs = start_cluster(replicas, log, args.num_ps, plane)
                    try:
                        results[plane, replicas].append(bench(spec, args, log, plane))
                    finally:
                        stop_cluster(procs)
                    for case, m in sorted(results[plane, replicas][-1].items()):
                        print(
                            f"round {r + 1} {plane:6s} R={replicas} {case:16s} "
                            f"{m['ops_per_s']:8.1f} push/s "
                            f"p50 {m['p50_ms']:7.2f} ms p99 {m['p99_ms']:7.2f} ms",
                            flush=True,
                        )
        if args.rounds > 0:
            print(f"\nmedians over {args.rounds} rounds, {args.inflight} pushes in flight:")
            for plane in planes:
                for case in sorted(results[plane, 1][0]):

                    def med(replicas, key):
                        return statistics.median(m[case][key] for m in results[plane, replicas])

                    r1, r2 = med(1, "ops_per_s"), med(2, "ops_per_s")
                    print(
                        f"{plane:6s} {case:16s} R=1 {r1:8.1f} push/s "
                        f"p99 {med(1, 'p99_ms'):7.2f} ms | "
                        f"R=2 {r2:8.1f} push/s p99 {med(2, 'p99_ms'):7.2f} ms | "
                        f"throughput {r2 / r1:.2f}x (target >= 0.6), "
                        f"p99 {med(2, 'p99_ms') / med(1, 'p99_ms'):.2f}x (target <= 2)"
                    )
        if args.kills > 0:
            times = [
                int(g[0])
                for g in test_runs(
                    "KilledPrimary",
                    r"failover: first push started after kill -9 acknowledged (\d+) ms",
                    args.kills,
                    log,
                )
            ]
            median = statistics.median(times)
            print(
                f"failover (kill -9 to first acknowledged push): median {median} ms "
                f"over {len(times)} kills, all {times}"
            )
        if args.rejoins > 0:
            runs = test_runs(
                "ARestartedPsRejoins",
                r"rejoined after (\d+) ms\nPS 1 rejoined as a backup: (\d+) shard\(s\), "
                r"(\d+) bytes from PS [\d, ]+ in (\S+)"
                r"(?s:.*?)unserved here for (\S+) while"
                r"(?s:.*?)handback pause: slowest push ([\d.]+) ms [^;]*; "
                r"median push before it ([\d.]+) ms\n"
                r"handback window ([\d.]+) ms [^:]*: slowest of the \d+ pushes in flight "
                r"across it ([\d.]+) ms; slowest push of the 1.5 s before the kill ([\d.]+) ms",
                args.rejoins,
                log,
            )
            for (
                restart_ms,
                shards,
                size,
                took,
                unserved,
                slowest,
                median,
                window,
                across,
                usual,
            ) in runs:
                print(
                    f"rejoin: restart to rejoined {restart_ms} ms; {shards} shards, "
                    f"{int(size) / 2**20:.1f} MiB copied in {seconds(took) * 1000:.0f} ms "
                    f"({int(size) / 2**20 / seconds(took):.0f} MiB/s) while 3 clients push"
                )
                print(
                    f"handback: unserved {seconds(unserved) * 1000:.2f} ms on the serving PS; "
                    f"slowest push after it {slowest} ms, median push before {median} ms; "
                    f"demote to settle {window} ms, slowest push in flight across that "
                    f"{across} ms against {usual} ms in the 1.5 s before the kill"
                )
            print(
                "rejoin: median restart to rejoined "
                f"{statistics.median(int(r[0]) for r in runs)} ms over {len(runs)} runs"
            )
            print(
                "handback: median slowest push after it "
                f"{statistics.median(float(r[5]) for r in runs):.1f} ms over {len(runs)} runs "
                f"(median push {statistics.median(float(r[6]) for r in runs):.1f} ms); "
                f"median demote to settle {statistics.median(float(r[7]) for r in runs):.2f} ms, "
                "slowest push in flight across it "
                f"{statistics.median(float(r[8]) for r in runs):.1f} ms against "
                f"{statistics.median(float(r[9]) for r in runs):.1f} ms before the kill"
            )


if __name__ == "__main__":
    main()
