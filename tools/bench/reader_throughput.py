#!/usr/bin/python3
"""Input pipeline throughput per format (LibSVM, TFRecord, Criteo TSV) and
parsing thread count: ps_worker's Dataset reading generated CTR data.

    bazel build //tools/ctr_datagen //tools/reader_bench
    /usr/bin/python3 tools/bench/reader_throughput.py --threads=1,2   # ~2 minutes

Generates --examples examples per format with ctr_datagen (once, under
--data_dir), then runs reader_bench on each: rounds interleave the thread
counts; medians of examples/s, MB/s and MB/s per parsing thread are printed,
so scaling to more cores can be read off.

--caches=files,memory,disk adds epochs served by ps_worker's --cache
(memory; a --cache=DIR file), and for the disk cache dd reads the same file
in the same run: the cache reader's MB/s is read against dd's (both from
the page cache unless the file outgrew it).
"""
import argparse
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepfm_throughput import BIN, ROOT  # noqa: E402


def dd_mb_per_s(path):
    """dd's read rate of `path`, in MB/s (10^6 bytes)."""
    out = subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", "bs=1M"], capture_output=True, text=True, check=True
    ).stderr
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", out)
    return int(m.group(1)) / float(m.group(2)) / 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default=os.path.join(ROOT, "out", "bench_readers"))
    p.add_argument("--examples", type=int, default=300000)
    p.add_argument("--formats", default="libsvm,tfrecord,criteo_tsv")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--caches", default="files", help="files, memory, disk (comma-separated)")
    p.add_argument("--cache_dir", default=os.path.join(ROOT, "out", "bench_reader_cache"))
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
                f"--caches={args.caches}",
                f"--cache_dir={os.path.join(args.cache_dir, fmt)}",
            ]
        )
        if "disk" in args.caches.split(","):
            for path in glob.glob(os.path.join(args.cache_dir, fmt, "*.cache")):
                rates = [dd_mb_per_s(path) for _ in range(args.rounds)]
                print(
                    f"  dd reads {os.path.basename(path)} "
                    f"({os.path.getsize(path) / 1e6:.1f} MB) at "
                    f"{sorted(rates)[len(rates) // 2]:.0f} MB/s (median of {len(rates)})"
                )


if __name__ == "__main__":
    main()
