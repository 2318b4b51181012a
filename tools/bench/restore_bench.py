#!/usr/bin/python3
"""Checkpoint restore speed and memory, against saving the same data in the
same run.

    bazel build //ps_server
    /usr/bin/python3 tools/bench/restore_bench.py [--gib=2] [--rounds=2] \\
        [--compare_bin_dir=DIR]   # DIR/ps_server/ps_server: another build
        [--s3]                    # checkpoints in s3rver (tools/install_deps.sh)
        [--tls]                   # with --s3: https, a private CA in AWS_CA_BUNDLE
        [--compare_no_reuse]      # also restore with --s3_reuse_connections=false

Each round:
  1. 4 PS create an embedding table (Adagrad, dim 16: values and
     accumulators, --gib GiB in all, NORMAL-initialized) and save it to local
     disk (files fsynced): the 4-PS save.
  2. 2 fresh PS started with --restore create it again: the restore, timed
     from create_variables' call to its return (checkpoint bytes / seconds),
     and each PS's peak RSS (VmHWM) over its steady state (its RSS before
     the creation plus the bytes of the shards it holds).
  3. Those 2 PS save it again: the save of the same data by the same PS,
     the figure the restore is held to (target >= 0.8x).
The independent baseline in the same round: `cat` of the checkpoint's
files to /dev/null (the restore reads the same files, from the page cache
as the restore does), or with --s3 one (unsigned) `curl` GET per
file, all at once, from the same s3rver. The save is psrt's own figure (the issue's target is
relative to it); its disk baseline is tools/bench/checkpoint_bench.py's.
With --compare_bin_dir the restore also runs with that build's ps_server
(same client), for a before/after figure; with --compare_no_reuse also with
this build's ps_server opening a new connection (and TLS handshake) per
request, for what the connection pool is worth.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import psrt  # noqa: E402
from checkpoint_bench import S3RVER, free_port, wait_port  # noqa: E402


def vm_field(pid, field):
    """A /proc/<pid>/status field in bytes (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Cluster:
    def __init__(self, num_ps, flags, bin_dir, log):
        ports = [free_port() for _ in range(num_ps)]
        self.spec = {"cluster": {"ps": [f"localhost:{p}" for p in ports]}}
        self.procs = []
        for i in range(num_ps):
            self.procs.append(
                subprocess.Popen(
                    [
                        os.path.join(bin_dir, "ps_server/ps_server"),
                        f"--cluster={json.dumps(self.spec)}",
                        f"--task_index={i}",
                        "--metrics_port=0",
                        "--checkpoint_on_shutdown=false",
                        "--keep_checkpoints=2",
                    ]
                    + S3["flags"]
                    + flags,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        self.client = psrt.Client(self.spec, timeout=3600.0)
        self.client.wait_for_servers(60)

    def stop(self):
        self.client.close()
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            p.wait()


def table(rows):
    return psrt.embedding(
        "table",
        vocab=rows,
        dim=16,
        num_shards=8,
        optimizer="adagrad",
        learning_rate=0.05,
        initializer=("normal", {"stddev": 0.01}),
    )


# With --s3: s3rver's endpoint, and the flags every PS gets.
S3 = {"endpoint": "", "flags": [], "tls": False}


def aws(*args, **kwargs):
    return subprocess.run(
        ["aws", "--endpoint-url", S3["endpoint"], "s3"] + list(args), check=True, **kwargs
    )


def checkpoint_bytes(uri):
    if uri.startswith("s3://"):
        manifest = json.loads(aws("cp", f"{uri}/MANIFEST.json", "-", capture_output=True).stdout)
    else:
        with open(os.path.join(uri, "MANIFEST.json")) as f:
            manifest = json.load(f)
    return sum(int(f["bytes"]) for f in manifest["files"]), [
        os.path.join(uri, f["path"]) for f in manifest["files"]
    ]


def baseline_read_seconds(uri, files):
    """Reads the checkpoint's files with an independent tool: `cat` (local:
    from the page cache, as the restore reads them), or (S3) one `curl` GET
    per file, all at once, to /dev/null."""
    start = time.time()
    if uri.startswith("s3://"):
        gets = [
            subprocess.Popen(
                # Unsigned (s3rver serves anonymous GETs; it refuses curl's
                # SigV4): if anything, less work than psrt's signed GETs.
                ["curl", "-sSf", "-o", "/dev/null"]
                + (["--cacert", os.environ["AWS_CA_BUNDLE"]] if S3["tls"] else [])
                + [f"{S3['endpoint']}/{f[len('s3://'):]}"]
            )
            for f in files
        ]
        if any(g.wait() != 0 for g in gets):
            raise RuntimeError("curl GET of a checkpoint file failed")
        return time.time() - start
    subprocess.run(["cat"] + files, check=True, stdout=subprocess.DEVNULL)
    return time.time() - start


def timed_save(cluster):
    start = time.time()
    response = cluster.client.checkpoint()
    return response.uri, time.time() - start


def restore(uri, bin_dir, rows, log, resave_root=None, extra_flags=()):
    flags = [f"--restore={uri}"] + list(extra_flags)
    if resave_root:
        flags.append(f"--checkpoint_uri={resave_root}")
    cluster = Cluster(2, flags, bin_dir, log)
    try:
        pids = [p.pid for p in cluster.procs]
        empty = [vm_field(pid, "VmRSS") for pid in pids]
        start = time.time()
        cluster.client.create_variables([table(rows)])
        seconds = time.time() - start
        peak = [vm_field(pid, "VmHWM") for pid in pids]
        # Steady state: the process as it started plus the shards it holds
        # (parameters and accumulators), what training runs with.
        held = [s.parameter_bytes for s in cluster.client.stats()]
        steady = [e + h for e, h in zip(empty, held)]
        resave = None
        if resave_root:
            new_uri, resave_seconds = timed_save(cluster)
            resave = (checkpoint_bytes(new_uri)[0], resave_seconds)
        return seconds, max(p / s for p, s in zip(peak, steady)), steady, resave
    finally:
        cluster.stop()


def make_certificates(d):
    """A CA and a certificate for 127.0.0.1 signed by it; sets AWS_CA_BUNDLE
    (read by ps_server and the AWS CLI); returns s3rver's TLS flags."""
    os.makedirs(d)
    script = f"""set -e; cd {d}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1
printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \\
    -days 2 -extfile san.ext
"""
    subprocess.run(["bash", "-c", script], check=True, capture_output=True)
    os.environ["AWS_CA_BUNDLE"] = os.path.join(d, "ca.pem")
    return ["--key", os.path.join(d, "server.key"), "--cert", os.path.join(d, "server.pem")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gib", type=float, default=2.0, help="parameters + accumulators")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    p.add_argument("--compare_bin_dir", default="")
    p.add_argument("--dir", default=os.path.join(ROOT, "out", "restore_bench"))
    p.add_argument(
        "--s3",
        action="store_true",
        help="checkpoints in s3rver on loopback (tools/install_deps.sh)",
    )
    p.add_argument("--tls", action="store_true", help="with --s3: s3rver over https")
    p.add_argument(
        "--compare_no_reuse",
        action="store_true",
        help="also restore with --s3_reuse_connections=false",
    )
    args = p.parse_args()
    if args.tls and not args.s3:
        p.error("--tls needs --s3")
    rows = int(args.gib * (1 << 30)) // (16 * 4 * 2)
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    log = open(os.path.join(args.dir, "servers.log"), "w")
    s3rver = None
    if args.s3:
        port = free_port()
        os.makedirs(os.path.join(args.dir, "s3"))
        tls = []
        if args.tls:
            tls = make_certificates(os.path.join(args.dir, "certs"))
            S3["tls"] = True
        s3rver = subprocess.Popen(
            ["/usr/bin/node", S3RVER, "-d", os.path.join(args.dir, "s3"), "-a", "127.0.0.1"]
            + ["-p", str(port), "--configure-bucket", "psrt", "--silent"]
            + tls,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        S3["endpoint"] = f"{'https' if args.tls else 'http'}://127.0.0.1:{port}"
        S3["flags"] = [f"--s3_endpoint={S3['endpoint']}"]
        os.environ.update(
            AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER", AWS_REGION="us-east-1"
        )
        os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
        wait_port(port)
    try:
        run(args, rows, log)
    finally:
        if s3rver:
            s3rver.send_signal(signal.SIGTERM)
            s3rver.wait()


def run(args, rows, log):
    base = "s3://psrt" if args.s3 else args.dir
    results = {
        k: []
        for k in [
            "save4_mb_s",
            "restore_mb_s",
            "resave2_mb_s",
            "peak_over_steady",
            "read_baseline_mb_s",
            "old_restore_mb_s",
            "old_peak_over_steady",
            "no_reuse_restore_mb_s",
            "no_reuse_peak_over_steady",
        ]
    }
    print(f"table: {rows:,} rows x 16 floats, Adagrad: {rows * 128 / 1e9:.2f} GB")
    for r in range(args.rounds):
        root = f"{base}/round{r}"
        saver = Cluster(4, [f"--checkpoint_uri={root}"], args.bin_dir, log)
        try:
            saver.client.create_variables([table(rows)])
            uri, seconds = timed_save(saver)
        finally:
            saver.stop()
        nbytes, files = checkpoint_bytes(uri)
        results["save4_mb_s"].append(nbytes / 1e6 / seconds)

        seconds = baseline_read_seconds(uri, files)
        results["read_baseline_mb_s"].append(nbytes / 1e6 / seconds)

        # (name, build, extra flags): this build first in even rounds.
        order = [("this", args.bin_dir, [])]
        if args.compare_bin_dir:
            order.append(("compare", args.compare_bin_dir, []))
        if args.compare_no_reuse:
            order.append(("no_reuse", args.bin_dir, ["--s3_reuse_connections=false"]))
        if r % 2 == 1:
            order.reverse()
        for name, bin_dir, extra in order:
            new = name == "this"
            seconds, peak_ratio, steady, resave = restore(
                uri, bin_dir, rows, log, f"{base}/resave{r}" if new else None, extra
            )
            prefix = {"this": "", "compare": "old_", "no_reuse": "no_reuse_"}[name]
            results[prefix + "restore_mb_s"].append(nbytes / 1e6 / seconds)
            results[prefix + "peak_over_steady"].append(peak_ratio)
            if new:
                results["resave2_mb_s"].append(resave[0] / 1e6 / resave[1])
            print(
                f"round {r} {name}: restore {nbytes / 1e6:.0f} MB"
                f" in {seconds:.2f} s ({nbytes / 1e6 / seconds:.0f} MB/s), peak RSS"
                f" {peak_ratio:.3f}x steady ({', '.join(f'{s / 2**20:.0f}' for s in steady)} MiB)"
                + (
                    f"; re-save by the same 2 PS {resave[0] / 1e6 / resave[1]:.0f} MB/s"
                    if new
                    else ""
                ),
                flush=True,
            )
        print(
            f"round {r}: 4-PS save {results['save4_mb_s'][-1]:.0f} MB/s, independent read"
            f" (cat or curl) {results['read_baseline_mb_s'][-1]:.0f} MB/s",
            flush=True,
        )
        if not args.s3:
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(f"{base}/resave{r}", ignore_errors=True)

    med = {k: statistics.median(v) for k, v in results.items() if v}
    print("\nmedians over", args.rounds, "rounds:")
    for k, v in med.items():
        print(f"  {k}: {v:.3f}")
    ratio = med["restore_mb_s"] / med["resave2_mb_s"]
    print(f"  restore / re-save (same 2 PS): {ratio:.2f}x (target >= 0.8)")
    print(f"  restore / 4-PS save: {med['restore_mb_s'] / med['save4_mb_s']:.2f}x")
    ratio = med["restore_mb_s"] / med["read_baseline_mb_s"]
    print(f"  restore / independent read of the files: {ratio:.2f}x")
    if "no_reuse_restore_mb_s" in med:
        pooled = med["restore_mb_s"] / med["no_reuse_restore_mb_s"]
        print(f"  restore with the connection pool / a connection per request: {pooled:.2f}x")
    if "old_restore_mb_s" in med:
        print(f"  restore vs compare build: {med['restore_mb_s'] / med['old_restore_mb_s']:.2f}x")
    print(json.dumps(med))


if __name__ == "__main__":
    main()
