#!/usr/bin/python3
"""The row path's ceiling: how fast one worker can read, de-duplicate, pull
and push a model's variables when it computes nothing (ps_worker
--compute=none), against the same worker running the model, in one run.

    bazel build //ps_server //ps_worker //tools/ctr_datagen
    /usr/bin/python3 tools/bench/row_path_ceiling.py            # ~5 minutes

One host (one ps_server + one ps_worker, deploy/local/launch.py), async,
generated CTR data (13 dense + 26 categorical fields, Zipf ids, as
./run.sh main makes it). For each model and batch size, rounds interleave
--compute=none and --compute=model; medians are reported with the workers'
per-step breakdown (data_ms: waiting for the next batch; pull_ms: waiting
for its rows; compute_ms; push_ms: waiting for the previous push). The
ceiling is the number every row-path change is judged by. --compare_bin_dir
runs a second build (e.g. an older main's bazel-bin copied aside) in the
same rounds, and prints each figure as a ratio to it. --pushes_in_flight,
--row_cache_staleness, --wire_dtypes and --variants run each case of this
build with each combination of the listed values (ps_worker
--pushes_in_flight, --row_cache_staleness, --wire_dtype, and any other
flags: --variants=",--prefetch_steps=2,--pushes_in_flight=2 --prefetch_steps=2"
is three variants, the first with no extra flag) and print each figure as
a ratio to the first combination; the compare build runs the first only
(an older build may not know the flags). --cache=memory (or a directory)
reads every epoch after the first from the example cache, so that the
figures are the row path's and not the parser's.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepfm_throughput import BIN, ROOT, ensure_data, run_psrt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=os.path.join(ROOT, "out", "bench_ctr_data"))
    p.add_argument("--data_examples", type=int, default=500000)
    p.add_argument("--models", default="deepfm,fm")
    p.add_argument("--batch_sizes", default="1024,8192")
    p.add_argument(
        "--examples",
        type=int,
        default=600000,
        help="examples per run (steps = examples / batch size)",
    )
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--bin_dir", default=BIN)
    p.add_argument(
        "--compare_bin_dir",
        default="",
        help="another build's bazel-bin, measured in the same rounds",
    )
    p.add_argument(
        "--pushes_in_flight",
        default="1",
        help="comma-separated ps_worker --pushes_in_flight values, measured in the same rounds",
    )
    p.add_argument(
        "--row_cache_staleness",
        default="0",
        help="comma-separated ps_worker --row_cache_staleness values, measured in the same rounds",
    )
    p.add_argument(
        "--wire_dtypes",
        default="fp32",
        help="comma-separated ps_worker --wire_dtype values, measured in the same rounds",
    )
    p.add_argument(
        "--variants",
        default="",
        help="comma-separated sets of other ps_worker flags (space-separated within a set)",
    )
    p.add_argument("--cache", default="", help="ps_worker --cache for every run")
    args = p.parse_args()
    variants = [
        (int(pif), int(s), dtype, extra)
        for pif in args.pushes_in_flight.split(",")
        for s in args.row_cache_staleness.split(",")
        for dtype in args.wire_dtypes.split(",")
        for extra in args.variants.split(",")
    ]
    ensure_data(args.data_dir, args.data_examples)
    builds = {"this": args.bin_dir}
    if args.compare_bin_dir:
        builds["compare"] = args.compare_bin_dir
    results = {}  # (build, model, batch, compute) -> [(ex/s, breakdown)]
    for r in range(args.rounds):
        for model in args.models.split(","):
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                steps = max(20, args.examples // batch)
                for build, bin_dir in builds.items():
                    for compute in ("none", "model"):
                        for pif, cache, dtype, extra in (
                            variants if build == "this" else variants[:1]
                        ):
                            flags = (f"--compute={compute}", "--device=cpu", *extra.split())
                            if args.cache:
                                flags += (f"--cache={args.cache}",)
                            if pif != 1:
                                flags += (f"--pushes_in_flight={pif}",)
                            if cache != 0:
                                flags += (f"--row_cache_staleness={cache}",)
                            if dtype != "fp32":
                                flags += (f"--wire_dtype={dtype}",)
                            rate, breakdown = run_psrt(
                                1,
                                args.data_dir,
                                steps,
                                batch,
                                1,
                                worker_flags=flags,
                                model=model,
                                bin_dir=bin_dir,
                            )
                            key = (build, model, batch, compute, pif, cache, dtype, extra)
                            results.setdefault(key, []).append((rate, breakdown))
                            print(
                                f"round {r + 1}/{args.rounds} {build} {model} batch={batch} "
                                f"compute={compute} pushes_in_flight={pif} "
                                f"row_cache_staleness={cache} wire_dtype={dtype} [{extra}]: "
                                f"{rate:.0f} ex/s "
                                + " ".join(f"{k}={v:.2f}" for k, v in breakdown.items()),
                                flush=True,
                            )
    print(f"\n1 host, medians of {args.rounds} rounds (examples/s; per-step ms):")
    summary = []
    for (build, model, batch, compute, pif, cache, dtype, extra), runs in sorted(results.items()):
        rate = statistics.median(x[0] for x in runs)
        ms = {k: statistics.median(x[1][k] for x in runs) for k in runs[0][1]}
        line = (
            f"  {build:8s} {model:7s} batch {batch:5d} compute={compute:5s} in_flight={pif} "
            f"cache={cache} {dtype} [{extra}] "
            f"{rate:10.0f} ex/s  " + " ".join(f"{k}={v:.2f}" for k, v in ms.items())
        )
        other = results.get(("compare", model, batch, compute, *variants[0]))
        if build == "this" and other:
            line += f"  {rate / statistics.median(x[0] for x in other):.2f}x compare"
        first = results.get((build, model, batch, compute, *variants[0]))
        if (pif, cache, dtype, extra) != variants[0] and first:
            line += (
                f"  {rate / statistics.median(x[0] for x in first):.2f}x "
                f"in_flight={variants[0][0]} cache={variants[0][1]} {variants[0][2]} "
                f"[{variants[0][3]}]"
            )
        print(line)
        summary.append(
            {
                "build": build,
                "model": model,
                "batch": batch,
                "compute": compute,
                "pushes_in_flight": pif,
                "row_cache_staleness": cache,
                "wire_dtype": dtype,
                "flags": extra,
                "examples_per_s": rate,
                "breakdown_ms": ms,
            }
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
