#!/usr/bin/python3
"""DeepFM on a GPU host: ps_worker --device=gpu against --device=cpu and
against PyTorch on the same GPU, in one run, on the same generated data.

    tools/gpu/run_on_device.sh        (packs nothing; see tools/gpu/README.md)
    python3 tools/bench/gpu_deepfm.py --batch_sizes=1024,8192

Each psrt run is one host (deploy/local/launch.py: one ps_server, one
ps_worker), async, Adagrad embeddings / Adam dense layers, the worker's
throughput from its "done:" line (the whole run, first pulls included).
PyTorch (tools/bench/torch_deepfm.py --device=cuda) trains the same
architecture with the same optimizers and batch, all data resident on the
GPU and no parameter server (its data loading and first step are not
timed); each round runs every --torch_variants (MLP as nn.Linear or 1x1
convolutions, Adagrad on unique rows or on the whole table) and keeps the
fastest, each printed. Rounds are
interleaved; medians are reported. --gpu_variants names the psrt GPU
configurations run each round: "default" (ps_worker's defaults), "tuned"
(--tuned_flags: the row-path options a GPU user would turn on) and
"tuned_bf16" (the same with bfloat16 on the wire). The CPU worker runs with
--cpu_flags (the tuned ones), so GPU / CPU compares devices, not options.

Like PyTorch, which reads its data from an .npz cache written by an earlier
run and starts its clock after the first step, the tuned psrt runs read
their parsed examples from a --cache=DIR file written by a warm-up run
before the first round ({cache} in the flags); their figure still covers
the whole run (first pulls included). Every run evaluates on the held-out
file, so a fast configuration that learns less shows.
"""
import argparse
import json
import os
import statistics
import subprocess

import deepfm_throughput as bench


def gpu_name():
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown GPU"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=os.path.join(bench.ROOT, "out", "gpu_bench_data"))
    p.add_argument("--data_examples", type=int, default=500000)
    p.add_argument("--steps", type=int, default=300, help="steps per run")
    p.add_argument("--batch_sizes", default="1024,8192")
    p.add_argument(
        "--cpu_towers",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="towers (threads) of the --device=cpu worker",
    )
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--gpu_variants",
        default="default,tuned,tuned_bf16",
        help="comma-separated psrt --device=gpu configurations: default, tuned, tuned_bf16",
    )
    # Not --prefetch_steps > 1: pulls sent further ahead read staler rows, and
    # on the H100 P = 2 cost 0.007 test AUC at 300 steps (P = 4 with 4 pushes
    # in flight: 0.05).
    tuned = "--cache={cache} --pushes_in_flight=2 --embedding_shards=4 --reader_threads=8"
    p.add_argument(
        "--tuned_flags",
        default=tuned,
        help="ps_worker flags of the 'tuned' configurations ({cache}: the warmed cache dir)",
    )
    p.add_argument(
        "--cpu_flags",
        default=tuned,
        help="ps_worker flags of the --device=cpu run",
    )
    p.add_argument(
        "--torch_variants",
        default="linear:rows,linear:table,conv1x1:table",
        help="torch_deepfm.py --mlp:--update pairs; the fastest is PyTorch's figure",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help="another psrt --device=gpu configuration (repeatable)",
    )
    p.add_argument(
        "--skip_cpu_and_torch",
        action="store_true",
        help="run only the psrt GPU configurations (a sweep of options)",
    )
    args = p.parse_args()
    bench.ensure_data(args.data_dir, args.data_examples, fmt="libsvm")
    cache = os.path.join(args.data_dir, "psrt_cache")

    def flags(text):
        return text.replace("{cache}", cache).split()

    known = {
        "default": [],
        "tuned": flags(args.tuned_flags),
        "tuned_bf16": flags(args.tuned_flags) + ["--wire_dtype=bf16"],
    }
    gpu_runs = {}
    for name in args.gpu_variants.split(","):
        if name not in known:
            p.error(f"--gpu_variants: unknown configuration {name!r} ({', '.join(known)})")
        gpu_runs[name] = known[name]
    for v in args.variant:
        name, _, text = v.partition("=")
        gpu_runs[name] = flags(text)
    common = ["--format=libsvm"]
    if any("--cache=" + cache in f for f in [*gpu_runs.values(), flags(args.cpu_flags)]):
        # The examples' cache file (one complete epoch; its key does not
        # depend on the batch size).
        steps = args.data_examples // 8192 + 8
        bench.run_psrt(
            1, args.data_dir, steps, 8192, 1, common + ["--compute=none", f"--cache={cache}"]
        )
    print(f"GPU: {gpu_name()}; {os.cpu_count()} CPU cores", flush=True)
    results = {}
    for r in range(args.rounds):
        for batch in [int(b) for b in args.batch_sizes.split(",")]:
            row = results.setdefault(
                batch, {"rate": {}, "auc": {}, "steady": {}, "breakdown_ms": {}}
            )

            def record(name, rate, extra):
                row["rate"].setdefault(name, []).append(rate)
                if "last_interval_examples_per_s" in extra:
                    steady = extra.pop("last_interval_examples_per_s")
                    row["steady"].setdefault(name, []).append(steady)
                if "auc" in extra:
                    row["auc"].setdefault(name, []).append(extra.pop("auc"))
                if extra:
                    row["breakdown_ms"][name] = extra

            for name, f in gpu_runs.items():
                rate, ms = bench.run_psrt(
                    1,
                    args.data_dir,
                    args.steps,
                    batch,
                    0,
                    common + ["--device=gpu"] + f,
                    evaluate=True,
                )
                record(f"psrt_gpu_{name}", rate, ms)
            if not args.skip_cpu_and_torch:
                rate, ms = bench.run_psrt(
                    1,
                    args.data_dir,
                    args.steps,
                    batch,
                    args.cpu_towers,
                    common + ["--device=cpu"] + flags(args.cpu_flags),
                    evaluate=True,
                )
                record("psrt_cpu", rate, ms)
                best = None
                for variant in args.torch_variants.split(","):
                    mlp, update = variant.split(":")
                    report = bench.run_torch_report(
                        args.data_dir,
                        args.steps * batch,
                        batch,
                        device="cuda",
                        evaluate=True,
                        extra=[f"--mlp={mlp}", f"--update={update}"],
                    )
                    print(
                        f"  PyTorch batch {batch} {variant}: {report['examples_per_s']:.0f} "
                        f"ex/s, test AUC {report['test_auc']:.4f}",
                        flush=True,
                    )
                    if best is None or report["examples_per_s"] > best["examples_per_s"]:
                        best = report
                record("pytorch_gpu", best["examples_per_s"], {"auc": best["test_auc"]})
            print(
                f"round {r + 1}/{args.rounds} batch {batch}: "
                + " ".join(
                    f"{k}={v[-1]:.0f} (AUC {row['auc'][k][-1]:.4f})" for k, v in row["rate"].items()
                ),
                flush=True,
            )
            for k, b in row["breakdown_ms"].items():
                print(f"  {k}: " + " ".join(f"{n}={x:.2f}" for n, x in b.items()), flush=True)
    for batch, row in results.items():
        med = {k: statistics.median(v) for k, v in row["rate"].items()}
        auc = {k: statistics.median(v) for k, v in row["auc"].items()}
        print(
            f"\nDeepFM, batch {batch}, {args.steps} steps, median of {args.rounds} "
            f"rounds (examples/s, test AUC):"
        )
        steady = {k: statistics.median(v) for k, v in row["steady"].items()}
        for k, v in med.items():
            line = f"  {k:22s} {v:10.0f}  AUC {auc[k]:.4f}"
            if k in steady:
                line += f"  last interval {steady[k]:10.0f}"
            if k.startswith("psrt_gpu") and "psrt_cpu" in med:
                line += (
                    f"   gpu/cpu = {v / med['psrt_cpu']:.2f}x   "
                    f"gpu/pytorch = {v / med['pytorch_gpu']:.2f}x"
                )
            print(line)
        for k, b in row["breakdown_ms"].items():
            share = b["compute_ms"] / max(1e-9, sum(b.values()))
            print(
                f"  per-step ms, {k} (last interval): "
                + " ".join(f"{n}={x:.2f}" for n, x in b.items())
                + f"  compute {100 * share:.0f}% of the step"
            )
    print(json.dumps({"gpu": gpu_name(), "results": results}))


if __name__ == "__main__":
    main()
