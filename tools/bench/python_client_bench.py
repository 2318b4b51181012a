#!/usr/bin/python3
"""The Python client against the C++ client on the same server, same run.

    bazel build //ps_server //tools/ps_bench //clients/python/psrt
    /usr/bin/python3 tools/bench/python_client_bench.py

One ps_server; the cases are ps_bench's: `dense_4MiB` and `dense_64MiB`
(1M and 16M floats, SGD, whole-variable push and pull) and
`embedding_100k` (a 1M x 16 Adagrad table, 100,000 distinct random ids per
operation, 4 batches cycled; push applies Adagrad, pull fetches rows).
ps_bench measures the C++ client (median of 3 x 2 s), then this script
measures psrt.Client (the C++ client bound) doing the same operations the
same way (pulls into one reused array, `out=`); rounds alternate. Target:
every case >= 0.9x the C++ client. Dense pulls into a new array each time
(pull_dense) are printed too: that adds the page faults of a fresh array.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "bazel-bin")
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))  # finds bazel-bin's build

import psrt  # noqa: E402


def measure(op, seconds, repeat):
    rates = []
    for _ in range(repeat):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            op()
            n += 1
        rates.append(n / (time.perf_counter() - start))
    return statistics.median(rates)


def python_round(client, seconds, repeat, fresh):
    out = {}
    for case, floats in (("dense_4MiB", 1 << 20), ("dense_64MiB", 16 << 20)):
        name = f"pybench/{case}"
        client.create_variables(
            [psrt.dense(name, (floats,), num_shards=client.num_ps, learning_rate=1e-6)]
        )
        grad, values = np.full(floats, 0.001, np.float32), np.empty(floats, np.float32)
        out[(case, "push")] = measure(lambda: client.push_dense(name, grad), seconds, repeat)
        # As ps_bench does: into one reused array (out=).
        pull = lambda: client.pull({name: None}, out={name: values})  # noqa: E731
        out[(case, "pull")] = measure(pull, seconds, repeat)
        # What pull_dense costs with a new array each time (no C++ twin).
        fresh[case] = measure(lambda: client.pull_dense(name), seconds, repeat)
    vocab, dim, n = 1_000_000, 16, 100_000
    client.create_variables(
        [
            psrt.embedding(
                "pybench/emb",
                vocab,
                dim,
                num_shards=client.num_ps,
                optimizer="adagrad",
                learning_rate=0.01,
            )
        ]
    )
    rng = np.random.default_rng(1)
    batches = [rng.permutation(vocab)[:n] for _ in range(4)]
    grads = np.full((n, dim), 0.01, np.float32)
    counter = [0]

    def next_batch():
        counter[0] += 1
        return batches[counter[0] % 4]

    out[("embedding_100k", "push")] = measure(
        lambda: client.push_rows("pybench/emb", next_batch(), grads), seconds, repeat
    )
    rows = np.empty((n, dim), np.float32)
    out[("embedding_100k", "pull")] = measure(
        lambda: client.pull({"pybench/emb": next_batch()}, out={"pybench/emb": rows}),
        seconds,
        repeat,
    )
    return out


def cpp_round(cluster, seconds, repeat):
    text = subprocess.run(
        [
            os.path.join(BIN, "tools/ps_bench/ps_bench"),
            f"--cluster={cluster}",
            "--cases=dense_4MiB,dense_64MiB,embedding_100k",
            "--tcp_baseline=false",
            "--json",
            f"--seconds={seconds}",
            f"--repeat={repeat}",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    out = {}
    for line in text.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            out[(r["case"], r["op"])] = r["ops_per_s"]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = json.dumps({"cluster": {"ps": [f"localhost:{port}"]}})
    server = subprocess.Popen(
        [os.path.join(BIN, "ps_server/ps_server"), f"--cluster={cluster}", "--metrics_port=0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ratios, fresh_rates = {}, {}
    try:
        client = psrt.Client(cluster)
        client.wait_for_servers(30)
        for r in range(args.rounds):
            cpp = cpp_round(cluster, args.seconds, args.repeat)
            py = python_round(client, args.seconds, args.repeat, fresh := {})
            for case, rate in fresh.items():
                fresh_rates.setdefault(case, []).append(rate)
            for key, rate in py.items():
                ratios.setdefault(key, []).append((rate, cpp[key]))
            print(
                f"round {r + 1}: "
                + ", ".join(
                    f"{c} {o} py {py[(c, o)]:.1f}/s cpp {cpp[(c, o)]:.1f}/s" for c, o in py
                ),
                flush=True,
            )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()
    print("\nPython client / C++ client, operations per second, median of rounds:")
    summary = {}
    for (case, op), pairs in ratios.items():
        ratio = statistics.median(py / cpp for py, cpp in pairs)
        summary[f"{case}/{op}"] = ratio
        print(
            f"  {case:15s} {op:5s} python {statistics.median(p for p, _ in pairs):8.1f}/s "
            f"c++ {statistics.median(c for _, c in pairs):8.1f}/s  ratio {ratio:.2f}"
        )
    for case, rates in fresh_rates.items():
        print(f"  {case:15s} pull  python {statistics.median(rates):8.1f}/s into a new array each")
    rounds = {f"{c}/{o}": v for (c, o), v in ratios.items()}
    print(json.dumps({"ratios": summary, "rounds": rounds, "fresh_array_pulls": fresh_rates}))


if __name__ == "__main__":
    main()
