#!/usr/bin/python3
"""Checkpoint throughput against baselines in the same run, and push latency
during checkpoints.

    bazel build //ps_server //tools/ckpt_bench
    tools/install_deps.sh          # s3rver, awscli
    /usr/bin/python3 tools/bench/checkpoint_bench.py [--table_rows=16777216]

One ps_server holds an Adagrad embedding table (1 GiB of parameters and
accumulators by default) while tools/ckpt_bench pushes to it and takes
checkpoints:

* local disk: psrt's checkpoint (shard files written, fsynced, renamed)
  against `dd if=<same number of bytes in /dev/shm> of=<same disk>
  bs=16M conv=fsync`;
* S3: the same checkpoint to s3rver on loopback against `aws s3 cp` of the
  same number of bytes (from /dev/shm) to the same s3rver.

Rounds alternate baseline and psrt; medians are reported, with push p99
latency during checkpoints over p99 without one.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "bazel-bin")
S3RVER = os.environ.get("PSRT_S3RVER", "/opt/psrt-node/node_modules/.bin/s3rver")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on {port}")


def start_server(flags, log):
    port = free_port()
    cluster = json.dumps({"cluster": {"ps": [f"localhost:{port}"]}})
    proc = subprocess.Popen(
        [
            os.path.join(BIN, "ps_server/ps_server"),
            f"--cluster={cluster}",
            "--metrics_port=0",
            "--keep_checkpoints=1",
            "--checkpoint_on_shutdown=false",
        ]
        + flags,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    wait_port(port)
    return proc, cluster


def run_ckpt_bench(cluster, args):
    out = subprocess.run(
        [
            os.path.join(BIN, "tools/ckpt_bench/ckpt_bench"),
            f"--cluster={cluster}",
            f"--table_rows={args.table_rows}",
            f"--checkpoints={args.checkpoints}",
            "--json",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    sys.stdout.write("".join(f"    {line}\n" for line in out.splitlines()[:-1]))
    return json.loads(out.strip().splitlines()[-1])


def timed(cmd, env=None):
    start = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    return time.time() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table_rows", type=int, default=16 << 20)
    p.add_argument("--checkpoints", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dir", default=os.path.join(ROOT, "out", "checkpoint_bench"))
    p.add_argument("--skip_s3", action="store_true")
    p.add_argument(
        "--cap_mb_s",
        type=float,
        default=400,
        help="also run the disk case with --checkpoint_max_mb_per_sec",
    )
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    nbytes = args.table_rows * 8 * 4 * 2  # dim 8, Adagrad: values + accumulator
    payload = "/dev/shm/psrt_checkpoint_bench_payload"
    with open(payload, "wb") as f:
        chunk = os.urandom(16 << 20)
        for _ in range(nbytes // len(chunk)):
            f.write(chunk)
        f.write(chunk[: nbytes % len(chunk)])
    log = open(os.path.join(args.dir, "servers.log"), "w")
    results = {
        "disk": {"psrt_mb_s": [], "dd_mb_s": [], "p99": [], "p50": []},
        "disk_capped": {"psrt_mb_s": [], "p99": [], "p50": []},
        "s3": {"psrt_mb_s": [], "awscli_mb_s": [], "p99": [], "p50": []},
    }
    try:
        # Local disk.
        for r in range(args.rounds):
            target = os.path.join(args.dir, "dd.bin")
            seconds = timed(["dd", f"if={payload}", f"of={target}", "bs=16M", "conv=fsync"])
            os.remove(target)
            results["disk"]["dd_mb_s"].append(nbytes / 1e6 / seconds)
            server, cluster = start_server(
                [f"--checkpoint_uri={os.path.join(args.dir, 'ckpt')}"], log
            )
            res = run_ckpt_bench(cluster, args)
            server.send_signal(signal.SIGTERM)
            server.wait()
            shutil.rmtree(os.path.join(args.dir, "ckpt"), ignore_errors=True)
            results["disk"]["psrt_mb_s"] += [
                c["bytes"] / 1e6 / c["seconds"] for c in res["checkpoints"]
            ]
            results["disk"]["p99"].append(res["push_p99_ms"])
            results["disk"]["p50"].append(res["push_p50_ms"])
            print(
                f"disk round {r + 1}: dd {results['disk']['dd_mb_s'][-1]:.0f} MB/s, "
                f"psrt {results['disk']['psrt_mb_s'][-1]:.0f} MB/s",
                flush=True,
            )
            if args.cap_mb_s > 0:
                server, cluster = start_server(
                    [
                        f"--checkpoint_uri={os.path.join(args.dir, 'ckpt')}",
                        f"--checkpoint_max_mb_per_sec={args.cap_mb_s}",
                    ],
                    log,
                )
                res = run_ckpt_bench(cluster, args)
                server.send_signal(signal.SIGTERM)
                server.wait()
                shutil.rmtree(os.path.join(args.dir, "ckpt"), ignore_errors=True)
                results["disk_capped"]["psrt_mb_s"] += [
                    c["bytes"] / 1e6 / c["seconds"] for c in res["checkpoints"]
                ]
                results["disk_capped"]["p99"].append(res["push_p99_ms"])
                results["disk_capped"]["p50"].append(res["push_p50_ms"])

        if not args.skip_s3:
            s3_port = free_port()
            s3_dir = tempfile.mkdtemp(dir=args.dir)
            s3rver = subprocess.Popen(
                [
                    "/usr/bin/node",
                    S3RVER,
                    "-d",
                    s3_dir,
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(s3_port),
                    "--configure-bucket",
                    "psrt",
                    "--silent",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            wait_port(s3_port)
            endpoint = f"http://127.0.0.1:{s3_port}"
            env = dict(
                os.environ,
                AWS_ACCESS_KEY_ID="S3RVER",
                AWS_SECRET_ACCESS_KEY="S3RVER",
                AWS_DEFAULT_REGION="us-east-1",
                AWS_REGION="us-east-1",
            )
            os.environ.update(env)
            try:
                for r in range(args.rounds):
                    seconds = timed(
                        [
                            "aws",
                            "--endpoint-url",
                            endpoint,
                            "s3",
                            "cp",
                            payload,
                            f"s3://psrt/awscli/round{r}",
                        ],
                        env=env,
                    )
                    results["s3"]["awscli_mb_s"].append(nbytes / 1e6 / seconds)
                    server, cluster = start_server(
                        [f"--checkpoint_uri=s3://psrt/psrt{r}", f"--s3_endpoint={endpoint}"], log
                    )
                    res = run_ckpt_bench(cluster, args)
                    server.send_signal(signal.SIGTERM)
                    server.wait()
                    results["s3"]["psrt_mb_s"] += [
                        c["bytes"] / 1e6 / c["seconds"] for c in res["checkpoints"]
                    ]
                    results["s3"]["p99"].append(res["push_p99_ms"])
                    results["s3"]["p50"].append(res["push_p50_ms"])
                    print(
                        f"s3 round {r + 1}: aws s3 cp "
                        f"{results['s3']['awscli_mb_s'][-1]:.0f} MB/s, psrt "
                        f"{results['s3']['psrt_mb_s'][-1]:.0f} MB/s",
                        flush=True,
                    )
            finally:
                s3rver.send_signal(signal.SIGTERM)
                s3rver.wait()
    finally:
        os.remove(payload)
        log.close()

    print(
        f"\nCheckpoint of {nbytes / 2**30:.2f} GiB (parameters + Adagrad slots), " f"1 PS, medians:"
    )
    for target, base in (("disk", "dd_mb_s"), ("disk_capped", None), ("s3", "awscli_mb_s")):
        r = results[target]
        if not r["psrt_mb_s"]:
            continue
        psrt = statistics.median(r["psrt_mb_s"])
        ratio99 = statistics.median(p[1] / p[0] for p in r["p99"])
        against = ""
        if base:
            baseline = statistics.median(r[base])
            against = f", {base[:-5]} {baseline:.0f} MB/s, ratio {psrt / baseline:.2f}"
        print(
            f"  {target}: psrt {psrt:.0f} MB/s{against}; push p99 without/during "
            "checkpoint "
            + ", ".join(f"{p[0]:.2f}/{p[1]:.2f} ms" for p in r["p99"])
            + f" (median ratio {ratio99:.2f})"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
