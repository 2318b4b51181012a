#!/usr/bin/python3
"""The PyTorch alternative to psrt, measured on the ps_bench cases.

A PyTorch user without psrt would hold parameters in a "ps" process and call
it with torch.distributed.rpc: rpc_sync to push a gradient (the ps applies
SGD or Adagrad in place) or to pull values. This script does exactly that,
over TensorPipe's TCP transport (the same loopback TCP psrt uses; TensorPipe's
shared-memory transport is disabled so both cross the same path), and prints
lines and --json objects in ps_bench's format.

    /usr/bin/python3 tools/bench/torch_rpc_baseline.py --json
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

# ---------------------------------------------------------------- ps side
_PARAMS = {}
_LOCK = threading.Lock()


def create(name, shape, adagrad):
    with _LOCK:
        if name not in _PARAMS:
            value = torch.zeros(shape)
            accum = torch.full(shape, 0.1) if adagrad else None
            _PARAMS[name] = (value, accum)


def push_dense(name, grad, lr):
    value, _ = _PARAMS[name]
    with _LOCK:
        value.add_(grad, alpha=-lr)


def pull_dense(name):
    value, _ = _PARAMS[name]
    with _LOCK:
        return value.clone()


def push_rows(name, ids, grad, lr):
    """Adagrad on the given (unique) rows, as psrt's server does."""
    value, accum = _PARAMS[name]
    with _LOCK:
        a = accum.index_select(0, ids).add_(grad * grad)
        accum.index_copy_(0, ids, a)
        value.index_add_(0, ids, grad / a.sqrt(), alpha=-lr)


def pull_rows(name, ids):
    value, _ = _PARAMS[name]
    with _LOCK:
        return value.index_select(0, ids)


# ------------------------------------------------------------ worker side
def measure(op, seconds, inflight):
    """ops/s of op() -> Future, keeping `inflight` calls outstanding."""
    for _ in range(2):
        op().wait()
    done = 0
    start = time.perf_counter()
    pending = [op() for _ in range(inflight)]
    while True:
        pending.pop(0).wait()
        done += 1
        now = time.perf_counter()
        if now - start >= seconds and done >= 3:
            break
        pending.append(op())
    for f in pending:
        f.wait()
    return done / (now - start)


def report(args, name, op, bytes_per_op, rates, rows_per_op=0):
    rate = statistics.median(rates)
    gbps = rate * bytes_per_op / 1e9
    line = f"{name:<16} {op:<5} {rate:9.1f} ops/s {gbps:7.3f} GB/s"
    if rows_per_op:
        line += f" {rate * rows_per_op / 1e6:7.2f}M rows/s"
    print(line + "  (torch.distributed.rpc)", flush=True)
    if args.json:
        print(
            json.dumps(
                {
                    "case": name,
                    "op": op,
                    "bytes_per_op": bytes_per_op,
                    "ops_per_s": rate,
                    "gbytes_per_s": gbps,
                    "rows_per_s": rate * rows_per_op,
                    "inflight": args.inflight,
                    "baseline": "torch.distributed.rpc",
                }
            ),
            flush=True,
        )


def worker(args):
    cases = args.cases.split(",")
    wanted = args.ops.split(",")
    for case in cases:
        if case.startswith("dense_"):
            floats = {"dense_4MiB": 1 << 20, "dense_64MiB": 16 << 20}[case]
            rpc.rpc_sync("ps", create, args=(case, (floats,), False))
            grad = torch.full((floats,), 0.001)
            for op, fn in (
                ("push", lambda: rpc.rpc_async("ps", push_dense, args=(case, grad, 1e-6))),
                ("pull", lambda: rpc.rpc_async("ps", pull_dense, args=(case,))),
            ):
                if op not in wanted:
                    continue
                rates = [measure(fn, args.seconds, args.inflight) for _ in range(args.repeat)]
                report(args, case, op, floats * 4, rates)
        elif case == "embedding_100k":
            n, dim = args.embedding_ids, args.embedding_dim
            rpc.rpc_sync("ps", create, args=(case, (args.vocab, dim), True))
            g = torch.Generator().manual_seed(1)
            batches = [torch.randperm(args.vocab, generator=g)[:n] for _ in range(4)]
            grad = torch.full((n, dim), 0.01)
            counter = iter(range(1 << 62))

            def push():
                return rpc.rpc_async(
                    "ps", push_rows, args=(case, batches[next(counter) % 4], grad, 0.01)
                )

            def pull():
                return rpc.rpc_async("ps", pull_rows, args=(case, batches[next(counter) % 4]))

            for op, fn in (("push", push), ("pull", pull)):
                if op not in wanted:
                    continue
                rates = [measure(fn, args.seconds, args.inflight) for _ in range(args.repeat)]
                report(args, case, op, n * (8 + 4 * dim), rates, rows_per_op=n)
        else:
            sys.exit(f"unknown case {case!r}")


def run(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    options = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=8, rpc_timeout=300, _transports=["uv"], _channels=["basic"]
    )
    name = "ps" if rank == 0 else "worker"
    rpc.init_rpc(name, rank=rank, world_size=2, rpc_backend_options=options)
    if rank == 1:
        worker(args)
    rpc.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="dense_4MiB,dense_64MiB,embedding_100k")
    parser.add_argument("--ops", default="push,pull")
    parser.add_argument("--seconds", type=float, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--inflight", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=1000000)
    parser.add_argument("--embedding_dim", type=int, default=16)
    parser.add_argument("--embedding_ids", type=int, default=100000)
    parser.add_argument("--port", type=int, default=29512)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print(
        f"torch {torch.__version__} rpc baseline: {args.inflight} op(s) in "
        f"flight, median of {args.repeat} x {args.seconds} s",
        flush=True,
    )
    mp.spawn(run, args=(args,), nprocs=2, join=True)


if __name__ == "__main__":
    main()
