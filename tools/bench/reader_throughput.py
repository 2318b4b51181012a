#!/usr/bin/python3
"""Input pipeline throughput per format (LibSVM, TFRecord, Criteo TSV) and
parsing thread count: ps_worker's Dataset reading generated CTR data.

    bazel build //tools/ctr_datagen //tools/reader_bench
    /usr/bin/python3 tools/bench/reader_throughput.py --threads=1,2   # ~2 minutes

Generates --examples examples per format with ctr_datagen (once, under
--data_dir), then runs reader_bench on each: rounds interleave the thread
counts; medians of examples/s, MB/s and MB/s per parsing thread are printed,
so scaling to more cores can be read off.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepfm_throughput import BIN, ROOT  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=os.path.join(ROOT, "out", "bench_readers"))
    p.add_argument("--examples", type=int, default=300000)
    p.add_argument("--formats", default="libsvm,tfrecord,criteo_tsv")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    for fmt in args.formats.split(","):
        out = os.path.join(args.data_dir, fmt)
        if not os.path.exists(os.path.join(out, "planted.json")):
            subprocess.check_call(
                [
                    os.path.join(BIN, "tools/ctr_datagen/ctr_datagen"),
                    f"--output_dir={out}",
                    f"--train_examples={args.examples}",
                    "--test_examples=1000",
                    f"--format={fmt}",
                ],
                stdout=subprocess.DEVNULL,
            )
        subprocess.check_call(
            [
                os.path.join(BIN, "tools/reader_bench/reader_bench"),
                f"--format={fmt}",
                f"--train_files={out}/train-*",
                f"--threads={args.threads}",
                f"--rounds={args.rounds}",
            ]
        )


if __name__ == "__main__":
    main()
