#!/usr/bin/python3
"""DeepFM on an unbounded, drifting id stream inside a per-PS memory budget
(issue 16's bench-sized run; tests/hash_rows_test has a smaller one).

    bazel build //ps_server //ps_worker //tools/ctr_datagen
    /usr/bin/python3 tools/bench/stream_budget_bench.py [--examples=20000000]

ctr_datagen writes a drifting stream (--drift_fraction of every large
field's vocabulary shifts every --drift_examples examples: new ids enter
the tail, climb to the head and leave; the held-out set is the last
generation's), about 2.5 distinct ids per example. DeepFM trains on it in
one pass, in stream order (--shuffle_files=false), through 2 ps_server and
one worker (deploy/local/launch.py, async, batch 1024), twice:

1. unbounded: the tables grow with every new id;
2. --memory_budget_mb = --budget_fraction (1/10) of the most row memory a
   PS accounted in run 1 (psrt_parameter_bytes at its peak).

(--unbounded_from=out/bench/stream_budget.json takes run 1 from an
earlier report on the same stream: one run instead of two.)

Every second each PS's resident memory is read from /proc/<pid>/status
(VmRSS, not the server's own report) and its /metrics scraped. The run
passes if both runs exit 0, every PS's RSS stays within budget + 15% at
every sample of run 2, and run 2's held-out AUC is within 0.005 of run
1's. Results: out/bench/stream_budget.json; exit status 1 if a check fails.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("PSRT_BIN_DIR", os.path.join(ROOT, "bazel-bin"))
MIB = 1 << 20
EVAL_AUC = re.compile(r"final eval_auc=([\d.]+)")
DONE = re.compile(r"done: steps=(\d+) examples=(\d+) seconds=([\d.]+) examples/s=([\d.]+)")
METRIC = re.compile(r"^(psrt_\w+)(?:\{([^}]*)\})? ([-\d.e+]+)$")


def generate(args):
    summary_path = os.path.join(args.data_dir, "planted.json")
    if os.path.exists(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
        if (
            summary.get("train_examples") == args.examples
            and summary.get("drift_fraction") == args.drift_fraction
        ):
            return summary
    subprocess.check_call(
        [
            os.path.join(BIN, "tools/ctr_datagen/ctr_datagen"),
            f"--output_dir={args.data_dir}",
            "--format=tfrecord",
            f"--train_examples={args.examples}",
            "--test_examples=100000",
            f"--train_files={args.train_files}",
            f"--drift_fraction={args.drift_fraction}",
            f"--drift_examples={args.drift_examples}",
        ]
    )
    with open(summary_path) as f:
        return json.load(f)


def ps_task(pid):
    """The task index launch.py gave `pid` in its TF_CONFIG (None if unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(
                entry.split("=", 1)
                for entry in f.read().decode(errors="replace").split("\0")
                if "=" in entry
            )
        return json.loads(env["TF_CONFIG"])["task"]["index"]
    except (OSError, KeyError, ValueError):
        return None


def children_named(parent, name):
    """Pids of `parent`'s children whose command is `name`, with their argv."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == parent and os.path.basename(argv[0]) == name:
            found.append((int(entry), argv))
    return found


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def scrape(port):
    """The psrt_ metrics summed over their labels (None if unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    sums = {}
    for line in text.splitlines():
        m = METRIC.match(line)
        if m:
            sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(3))
    return sums


class Sampler(threading.Thread):
    """Every second: each PS's VmRSS and metrics; progress every 30 s."""

    def __init__(self, launcher, label):
        super().__init__(daemon=True)
        self.launcher, self.label = launcher, label
        self.stop = threading.Event()
        self.servers = {}  # pid -> {"task", "port", "rss", "metrics", ...}

    def find_servers(self):
        for pid, argv in children_named(self.launcher.pid, "ps_server"):
            if pid in self.servers:
                continue
            port = next(int(a.split("=")[1]) for a in argv if a.startswith("--metrics_port="))
            task = ps_task(pid)
            self.servers[pid] = {
                "task": task if task is not None else len(self.servers),
                "metrics_port": port,
                "rss_samples": [],
                "rss_start": None,
                "peak_parameter_bytes": 0,
                "last_metrics": {},
            }

    def run(self):
        start = time.time()
        next_progress = start + 30
        while not self.stop.wait(1.0):
            if len(self.servers) < 2:
                self.find_servers()
            for pid, s in self.servers.items():
                rss = rss_bytes(pid)
                if rss is None:
                    continue
                if s["rss_start"] is None:
                    s["rss_start"] = rss
                s["rss_samples"].append(rss)
                metrics = scrape(s["metrics_port"])
                if metrics:
                    s["last_metrics"] = metrics
                    s["peak_parameter_bytes"] = max(
                        s["peak_parameter_bytes"], metrics.get("psrt_parameter_bytes", 0)
                    )
            if time.time() >= next_progress:
                next_progress += 30
                parts = []
                for s in sorted(self.servers.values(), key=lambda s: s["task"]):
                    m = s["last_metrics"]
                    parts.append(
                        f"ps{s['task']}: RSS {s['rss_samples'][-1] / MIB:.0f} MiB"
                        f" (most {max(s['rss_samples']) / MIB:.0f}), rows "
                        f"{m.get('psrt_variable_rows', 0):,.0f}, evicted "
                        f"{m.get('psrt_evicted_rows_total', 0):,.0f}"
                        if s["rss_samples"]
                        else f"ps{s['task']}: starting"
                    )
                print(
                    f"[{self.label} {time.time() - start:.0f} s] " + "; ".join(parts),
                    flush=True,
                )


def train(args, label, ps_flags, worker_flags=()):
    logs = tempfile.mkdtemp(prefix=f"psrt_stream_{label}_")
    cmd = [
        sys.executable,
        os.path.join(ROOT, "deploy/local/launch.py"),
        "--hosts=2",
        "--workers=1",
        f"--logs={logs}",
        "--base_port=25000",
        f"--bin_dir={BIN}",
        *[f"--ps_flag={f}" for f in ps_flags],
        "--",
        os.path.join(BIN, "ps_worker/ps_worker"),
        "--model=deepfm",
        f"--train_files={args.data_dir}/train-*",
        f"--eval_files={args.data_dir}/test.tfrecords",
        "--epochs=1",
        "--batch_size=1024",
        # A stream: the files hold consecutive stretches of it, trained in
        # order (shuffled within the worker's buffer only).
        "--shuffle_files=false",
        "--log_every_steps=2000",
        *worker_flags,
    ]
    print(f"{label}: " + " ".join(cmd), flush=True)
    began = time.time()
    launcher = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    sampler = Sampler(launcher, label)
    sampler.start()
    code = launcher.wait()
    sampler.stop.set()
    sampler.join()
    with open(os.path.join(logs, "worker_0.log")) as f:
        worker = f.read()
    auc = EVAL_AUC.findall(worker)
    done = DONE.findall(worker)
    result = {
        "label": label,
        "ps_flags": ps_flags,
        "worker_flags": list(worker_flags),
        "exit_code": code,
        "logs": logs,
        "seconds": round(time.time() - began, 1),
        "auc": float(auc[-1]) if auc else None,
        "examples_per_s": float(done[-1][3]) if done else None,
        "servers": [],
    }
    for s in sorted(sampler.servers.values(), key=lambda s: s["task"]):
        m = s["last_metrics"]
        result["servers"].append(
            {
                "task": s["task"],
                "samples": len(s["rss_samples"]),
                "rss_start_mib": round(s["rss_start"] / MIB, 1),
                "rss_most_mib": round(max(s["rss_samples"]) / MIB, 1),
                "rss_last_mib": round(s["rss_samples"][-1] / MIB, 1),
                "peak_parameter_mib": round(s["peak_parameter_bytes"] / MIB, 1),
                "rows": int(m.get("psrt_variable_rows", 0)),
                "evicted_rows": int(m.get("psrt_evicted_rows_total", 0)),
                "rss_samples_mib": [round(r / MIB, 1) for r in s["rss_samples"]],
            }
        )
    print(
        f"{label}: exit {code}, {result['seconds']} s, AUC {result['auc']}, "
        + "; ".join(
            f"ps{s['task']} RSS most {s['rss_most_mib']} MiB, rows {s['rows']:,}, "
            f"evicted {s['evicted_rows']:,}, accounted most {s['peak_parameter_mib']} MiB"
            for s in result["servers"]
        ),
        flush=True,
    )
    return result


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--examples", type=int, default=20000000)
    parser.add_argument("--drift_fraction", type=float, default=0.02)
    parser.add_argument("--drift_examples", type=int, default=50000)
    parser.add_argument("--train_files", type=int, default=8)
    parser.add_argument("--budget_fraction", type=float, default=0.1)
    parser.add_argument("--data_dir", default=os.path.join(ROOT, "out", "stream_data"))
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "bench"))
    parser.add_argument(
        "--budget_worker_flag",
        action="append",
        default=[],
        help="a ps_worker flag for the budget run only (repeatable), e.g. "
        "--budget_worker_flag=--admission_min_count=3",
    )
    parser.add_argument(
        "--unbounded_from",
        default="",
        help="take the unbounded run from this earlier stream_budget.json (same stream)",
    )
    args = parser.parse_args()
    if args.examples < 1 or not 0 < args.budget_fraction < 1:
        parser.error("--examples must be >= 1 and --budget_fraction in (0, 1)")
    for binary in ("ps_server/ps_server", "ps_worker/ps_worker", "tools/ctr_datagen/ctr_datagen"):
        if not os.path.exists(os.path.join(BIN, binary)):
            sys.exit(f"{binary} not built: bazel build //ps_server //ps_worker //tools/ctr_datagen")
    os.makedirs(args.out, exist_ok=True)
    data = generate(args)
    print(f"stream: {json.dumps(data)}", flush=True)

    if args.unbounded_from:
        # The unbounded run of an earlier report on the same stream.
        with open(args.unbounded_from) as f:
            earlier = json.load(f)
        if earlier["stream"] != data:
            sys.exit(f"{args.unbounded_from} was measured on another stream")
        unbounded = earlier["runs"][0]
        print(f"unbounded: from {args.unbounded_from}: AUC {unbounded['auc']}", flush=True)
    else:
        unbounded = train(args, "unbounded", [])
    need = max((s["peak_parameter_mib"] for s in unbounded["servers"]), default=0)
    budget_mib = max(1, math.ceil(need * args.budget_fraction))
    bounded = train(args, "budget", [f"--memory_budget_mb={budget_mib}"], args.budget_worker_flag)

    limit_mib = budget_mib * 1.15
    failures = []
    for run in (unbounded, bounded):
        if run["exit_code"] != 0:
            failures.append(f"{run['label']} run exited {run['exit_code']} (logs: {run['logs']})")
        if run["auc"] is None:
            failures.append(f"{run['label']} run printed no eval AUC (logs: {run['logs']})")
        if len(run["servers"]) != 2:
            failures.append(f"{run['label']} run: sampled {len(run['servers'])} PS, not 2")
    for s in bounded["servers"]:
        over = [r for r in s["rss_samples_mib"] if r > limit_mib]
        if over:
            failures.append(
                f"ps{s['task']}: {len(over)} of {s['samples']} RSS samples above "
                f"{limit_mib:.0f} MiB (budget {budget_mib} MiB + 15%), most {max(over)} MiB"
            )
    if unbounded["auc"] is not None and bounded["auc"] is not None:
        gap = bounded["auc"] - unbounded["auc"]
        if abs(gap) > 0.005:
            failures.append(f"AUC {bounded['auc']} vs unbounded {unbounded['auc']}: {gap:+.4f}")
    report = {
        "stream": data,
        "budget_mib": budget_mib,
        "rss_limit_mib": round(limit_mib, 1),
        "runs": [unbounded, bounded],
        "failures": failures,
    }
    with open(os.path.join(args.out, "stream_budget.json"), "w") as f:
        json.dump(report, f)
    print(
        f"\n{data['distinct_train_ids']:,} distinct ids in {data['train_examples']:,} examples "
        f"({data['generations']} generations); planted AUC {data['planted_test_auc']}"
    )
    columns = "per PS: most RSS / accounted most / rows at end / evicted"
    print(f"{'run':<10}{'AUC':>8}{'ex/s':>9}  {columns}")
    for run in (unbounded, bounded):
        per_ps = "; ".join(
            f"{s['rss_most_mib']:.0f} / {s['peak_parameter_mib']:.0f} MiB / {s['rows']:,} / "
            f"{s['evicted_rows']:,}"
            for s in run["servers"]
        )
        print(
            f"{run['label']:<10}{run['auc'] or 0:>8.4f}{run['examples_per_s'] or 0:>9.0f}  {per_ps}"
        )
    print(f"budget {budget_mib} MiB a PS (limit {limit_mib:.0f} MiB RSS, every second)")
    for f in failures:
        print("FAILED: " + f)
    print("stream_budget_bench: " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
