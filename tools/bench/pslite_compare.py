#!/usr/bin/python3
"""psrt against ps-lite (dmlc/ps-lite) on ps_bench's cases, interleaved in
one run: psrt with its data plane (--data_plane=fabric) and over gRPC, and
ps-lite, on dense_4MiB and dense_64MiB (SGD push, whole-value pull) and
embedding_100k (Adagrad push and pull of 100k random rows of a 1M x 16
table), one operation in flight, one server, one worker, loopback.

    # ps-lite's source is never part of this repository: bring a checkout
    # (github.com/dmlc/ps-lite) and build its library against Debian's
    # libzmq3-dev and protobuf:
    apt-get install libzmq3-dev
    make -C PSLITE ps DEPS_PATH=/usr PROTOC=/usr/bin/protoc
    bazel build //ps_server //tools/ps_bench
    /usr/bin/python3 tools/bench/pslite_compare.py --pslite_dir=PSLITE

Each round runs ps_bench --json (which measures the raw TCP baseline and iperf3
beside every case) against a fresh ps_server, then tools/bench/pslite/
pslite_bench.cc (compiled here against PSLITE) with a ps-lite scheduler,
server and worker. Medians over rounds; psrt / ps-lite per case and
operation, and both against the TCP baseline.
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
from run_benchmarks import BIN, ROOT, free_port, run  # noqa: E402

CASES = "dense_4MiB,dense_64MiB,embedding_100k"
PSLITE_LINE = re.compile(r"^pslite (\S+)\s+(push|pull)\s+([\d.]+) ops/s\s+([\d.]+) GB/s")


def build_driver(pslite_dir, out):
    meta = os.path.join(pslite_dir, "src", "meta.pb.h")
    if not os.path.exists(meta):
        subprocess.check_call(
            ["protoc", "--cpp_out=src", "--proto_path=src", "src/meta.proto"], cwd=pslite_dir
        )
    lib = os.path.join(pslite_dir, "build", "libps.a")
    if not os.path.exists(lib):
        sys.exit(f"{lib} missing: build ps-lite first (see --help)")
    subprocess.check_call(
        [
            "g++",
            "-std=c++17",
            "-O3",
            "-march=x86-64-v3",  # as psrt's default build
            "-I" + os.path.join(pslite_dir, "src"),
            "-I" + os.path.join(pslite_dir, "include"),
            os.path.join(ROOT, "tools/bench/pslite/pslite_bench.cc"),
            lib,
            "-lzmq",
            "-lprotobuf",
            "-pthread",
            "-o",
            out,
        ]
    )


def run_psrt(seconds, log, data_plane):
    """{(case, op): ps_bench's JSON result} against a fresh ps_server, with
    pushes and pulls over `data_plane` (fabric or grpc) on both sides."""
    port = free_port()
    server = subprocess.Popen(
        [
            os.path.join(BIN, "ps_server/ps_server"),
            f"--port={port}",
            "--metrics_port=0",
            f"--data_plane={data_plane}",
        ],
        stdout=log,
        stderr=log,
    )
    try:
        time.sleep(1)
        results = run(
            [
                os.path.join(BIN, "tools/ps_bench/ps_bench"),
                f'--cluster={{"cluster": {{"ps": ["127.0.0.1:{port}"]}}}}',
                f"--cases={CASES}",
                "--repeat=1",
                f"--seconds={seconds}",
                f"--data_plane={data_plane}",
                "--json",
            ],
            log,
        )
    finally:
        server.kill()
        server.wait()
    return {(r["case"], r["op"]): r for r in results}


def run_pslite(driver, seconds):
    env = dict(
        os.environ,
        DMLC_NUM_SERVER="1",
        DMLC_NUM_WORKER="1",
        DMLC_PS_ROOT_URI="127.0.0.1",
        DMLC_PS_ROOT_PORT=str(free_port()),
        DMLC_INTERFACE="lo",
        BENCH_SECONDS=str(seconds),
    )
    others = [
        subprocess.Popen(
            [driver],
            env=dict(env, DMLC_ROLE=role),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for role in ("scheduler", "server")
    ]
    try:
        out = subprocess.run(
            [driver],
            env=dict(env, DMLC_ROLE="worker"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=600,
        ).stdout
        for p in others:
            p.wait(timeout=60)
    finally:
        for p in others:
            if p.poll() is None:
                p.kill()
    results = {}
    for line in out.splitlines():
        m = PSLITE_LINE.match(line)
        if m:
            results[(m[1], m[2])] = float(m[4])
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pslite_dir", help="a built ps-lite checkout")
    p.add_argument(
        "--pslite_driver",
        help="pslite_bench already built from --pslite_dir (on a host without its headers)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2)
    args = p.parse_args()
    if not args.pslite_driver and not args.pslite_dir:
        p.error("--pslite_dir or --pslite_driver is needed")
    driver = args.pslite_driver
    if not driver:
        driver = os.path.join(tempfile.mkdtemp(prefix="pslite_bench_"), "pslite_bench")
        build_driver(os.path.abspath(args.pslite_dir), driver)
    os.makedirs(os.path.join(ROOT, "out", "bench"), exist_ok=True)
    log = open(os.path.join(ROOT, "out", "bench", "pslite_compare.log"), "w")
    psrt = {"fabric": {}, "grpc": {}}
    tcp, iperf3, pslite = {}, {}, {}
    for r in range(args.rounds):
        for data_plane in ("fabric", "grpc"):
            for key, result in run_psrt(args.seconds, log, data_plane).items():
                psrt[data_plane].setdefault(key, []).append(result["gbytes_per_s"])
                tcp.setdefault(key, []).append(result["tcp_gbytes_per_s"])
                iperf3.setdefault(key, []).append(result["iperf3_gbytes_per_s"])
        for key, gbs in run_pslite(driver, args.seconds).items():
            pslite.setdefault(key, []).append(gbs)
        print(f"round {r + 1}/{args.rounds}: psrt {psrt} ps-lite {pslite}", flush=True)
    print(f"\nmedians of {args.rounds} rounds (GB/s; ids + rows for embeddings):")
    print(
        f"{'case':16} {'op':5} {'fabric':>7} {'grpc':>7} {'ps-lite':>8} {'fabric/ps-lite':>15} "
        f"{'grpc/ps-lite':>13} {'fabric/grpc':>12} {'iperf3':>7} {'fabric/iperf3':>14}"
    )
    for key in sorted(psrt["fabric"]):
        if key not in pslite or key not in psrt["grpc"]:
            continue
        f, g, b, t, i = (
            statistics.median(x[key]) for x in (psrt["fabric"], psrt["grpc"], pslite, tcp, iperf3)
        )
        print(
            f"{key[0]:16} {key[1]:5} {f:7.3f} {g:7.3f} {b:8.3f} {f / b:14.2f}x "
            f"{g / b:12.2f}x {f / g:11.2f}x {i:7.2f} "
            + (f"{f / i:13.2f}x" if i > 0 else "   (no iperf3)")
            + ("  (TCP baseline below 0.9x iperf3)" if t < 0.9 * i else "")
        )


if __name__ == "__main__":
    main()
