#!/usr/bin/python3
"""Wide & Deep on the UCI Adult census data in PyTorch -- trained locally, or
with its embeddings and dense weights on a psrt cluster by several worker
processes. The psrt version differs from the local one by the lines marked
"psrt:".

    # locally
    examples/python/adult_wide_deep.py --data=testdata/adult --local
    # on a local cluster: 2 hosts, each a ps_server and a worker running
    # this script (cluster and worker index from the TF_CONFIG the launcher
    # sets; worker i of n trains shard i); --mode=sync: each step's
    # gradients of both workers are averaged into one update
    deploy/local/launch.py --hosts=2 -- \
        examples/python/adult_wide_deep.py --data=testdata/adult --mode=sync
    # or started by hand on each host
    examples/python/adult_wide_deep.py --data=testdata/adult \
        --cluster='{"cluster": {"ps": ["localhost:2223", "localhost:2224"]}}' \
        --worker_index=0 --num_workers=2
    # then evaluate what the servers hold
    examples/python/adult_wide_deep.py --data=testdata/adult --cluster=... --evaluate_only
    # hybrid: the MLP by torch DistributedDataParallel (Gloo all-reduce,
    # torch.optim on every worker), the embeddings on psrt (as ps_worker
    # --dense_sync=allreduce); under the launcher or torchrun
    deploy/local/launch.py --hosts=2 -- \
        examples/python/adult_wide_deep.py --data=testdata/adult --mode=sync --ddp

Prints one line per epoch and `test_accuracy=<x>` at the end (in sync mode
every worker evaluates the same final parameters); with --ddp also
`dense_crc32=<x>`, a checksum of the worker's MLP parameters (equal on every
worker: DDP averages the gradients, every worker applies the same Adam).

--ddp joins torch.distributed's Gloo process group: through torchrun's
MASTER_ADDR and MASTER_PORT where set, else at TF_CONFIG's worker 0 address
(its port is one no worker listens on; the group's store takes it).
"""
import argparse
import datetime
import json
import os
import sys
import zlib

import numpy as np
import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python")
)

CATEGORICAL = [1, 3, 5, 6, 7, 8, 9, 13]  # workclass .. native-country
CONTINUOUS = [0, 2, 4, 10, 11, 12]  # age, fnlwgt, education-num, gains, hours
CROSSES = [(3, 6), (1, 6), (5, 7), (0, 3)]  # education x occupation, ... (0 = age bucket)


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.strip().rstrip(".").split(",")]
            if len(parts) == 15:
                rows.append(parts)
    return rows


def featurize(train_rows, test_rows):
    """Categorical values, age buckets and crosses -> one id space; the
    continuous columns standardized. Vocabulary from the training data."""
    vocab = {}

    def ids_of(rows, grow):
        out = np.zeros((len(rows), len(CATEGORICAL) + len(CROSSES) + 1), np.int64)
        for r, row in enumerate(rows):
            age_bucket = str(min(int(row[0]) // 5, 15))
            keys = [f"{c}={row[c]}" for c in CATEGORICAL] + [f"age={age_bucket}"]
            for a, b in CROSSES:
                va = age_bucket if a == 0 else row[a]
                keys.append(f"{a}x{b}={va}|{row[b]}")
            for k, key in enumerate(keys):
                if key not in vocab and grow:
                    vocab[key] = len(vocab) + 1  # 0 = unseen
                out[r, k] = vocab.get(key, 0)
        return out

    train_ids, test_ids = ids_of(train_rows, True), ids_of(test_rows, False)
    cont = [
        np.array([[float(row[c]) for c in CONTINUOUS] for row in rows], np.float32)
        for rows in (train_rows, test_rows)
    ]
    cont = [np.log1p(np.maximum(x, 0)) for x in cont]
    mean, std = cont[0].mean(0), cont[0].std(0) + 1e-6
    cont = [(x - mean) / std for x in cont]
    labels = [
        np.array([row[14].startswith(">50K") for row in rows], np.float32)
        for rows in (train_rows, test_rows)
    ]
    return (train_ids, cont[0], labels[0]), (test_ids, cont[1], labels[1]), len(vocab) + 1


class WideDeep(torch.nn.Module):
    def __init__(self, wide, deep, fields, dim, dense_dim):
        super().__init__()
        self.wide, self.deep = wide, deep  # embeddings: [*, 1] and [*, dim]
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(fields * dim + dense_dim, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, 32),
            torch.nn.ReLU(),
            torch.nn.Linear(32, 1),
        )

    def forward(self, ids, dense):
        wide = self.wide(ids).sum(dim=(1, 2))
        deep = self.mlp(torch.cat([self.deep(ids).flatten(1), dense], dim=1)).squeeze(1)
        return wide + deep


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="testdata/adult")
    p.add_argument("--local", action="store_true", help="train without psrt")
    p.add_argument(
        "--cluster", default=None, help="TF_CONFIG-style JSON (psrt mode; default $TF_CONFIG)"
    )
    p.add_argument(
        "--worker_index", type=int, default=None, help="default: psrt.worker_info() (TF_CONFIG)"
    )
    p.add_argument("--num_workers", type=int, default=None, help="default: psrt.worker_info()")
    p.add_argument(
        "--mode", choices=["async", "sync"], default="async", help="psrt: how workers combine"
    )
    p.add_argument(
        "--ddp",
        action="store_true",
        help="psrt: the MLP by DistributedDataParallel (Gloo), the embeddings on psrt",
    )
    p.add_argument("--evaluate_only", action="store_true")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    train, test, vocab = featurize(
        read(os.path.join(args.data, "adult.data")), read(os.path.join(args.data, "adult.test"))
    )
    fields, dense_dim = train[0].shape[1], train[1].shape[1]
    if args.local:
        args.worker_index, args.num_workers = 0, 1

    if args.local:
        wide = torch.nn.Embedding(vocab, 1, sparse=True)
        deep = torch.nn.Embedding(vocab, args.dim, sparse=True)
        torch.nn.init.zeros_(wide.weight)
        torch.nn.init.trunc_normal_(deep.weight, std=0.01)
        model = WideDeep(wide, deep, fields, args.dim, dense_dim)
        sparse_opt = torch.optim.Adagrad(
            list(wide.parameters()) + list(deep.parameters()),
            lr=0.05,
            initial_accumulator_value=0.1,
        )
        dense_opt = torch.optim.Adam(model.mlp.parameters(), lr=1e-3, eps=1e-7)
    else:
        import psrt  # psrt:
        import psrt.torch  # psrt:

        info = psrt.worker_info()  # psrt: which worker, from TF_CONFIG or torchrun
        if args.worker_index is not None or args.num_workers is not None:
            info = psrt.WorkerInfo(args.worker_index or 0, args.num_workers or 1, 0)
        args.worker_index, args.num_workers = info.rank, info.world_size
        client = psrt.Client(args.cluster, mode=args.mode, worker=info)  # psrt:
        wide = psrt.torch.Embedding(
            client,
            "wd/wide",
            vocab,
            1,  # psrt:
            initializer="zeros",
            optimizer="adagrad",
            learning_rate=0.05,
        )
        deep = psrt.torch.Embedding(
            client, "wd/deep", vocab, args.dim, optimizer="adagrad", learning_rate=0.05  # psrt:
        )
        model = WideDeep(wide, deep, fields, args.dim, dense_dim)
        if args.ddp:
            # psrt: the MLP all-reduced among the workers, the embeddings
            # on the servers.
            join_process_group(args.cluster, info)
            model.mlp = torch.nn.parallel.DistributedDataParallel(model.mlp)
            dense_opt = torch.optim.Adam(model.mlp.parameters(), lr=1e-3, eps=1e-7)
            steps = psrt.torch.Steps(client, [wide, deep])
        else:
            dense = psrt.torch.DenseParameters(
                client, model.mlp, prefix="wd/mlp/", optimizer="adam", learning_rate=1e-3  # psrt:
            )
            steps = psrt.torch.Steps(client, [wide, deep, dense])  # psrt: one push a step
    step = 0

    if not args.evaluate_only:
        # This worker's shard of the training data.
        n = train[0].shape[0]
        mine = np.arange(args.worker_index, n, args.num_workers)
        # Every worker takes as many steps (sync mode waits for all of them
        # each step): the smallest shard's size.
        mine = mine[: n // args.num_workers]
        rng = np.random.default_rng(args.seed + args.worker_index)
        loss_fn = torch.nn.BCEWithLogitsLoss()
        for epoch in range(args.epochs):
            order = rng.permutation(mine)
            total = 0.0
            for b in range(0, order.size, args.batch_size):
                idx = order[b : b + args.batch_size]
                ids, x, y = (torch.from_numpy(t[idx]) for t in train)
                if args.local:
                    sparse_opt.zero_grad()
                    dense_opt.zero_grad()
                else:
                    steps.pull(step)  # psrt: this step's dense weights
                    model.mlp.zero_grad()
                loss = loss_fn(model(ids, x), y)
                loss.backward()  # (--ddp: the MLP's gradients averaged)
                if args.local:
                    sparse_opt.step()
                    dense_opt.step()
                else:
                    if args.ddp:
                        dense_opt.step()
                    steps.push()  # psrt: rows' and dense gradients, one push
                step += 1
                total += loss.item() * idx.size
            print(
                f"worker {args.worker_index} epoch {epoch} loss={total / mine.size:.5f}", flush=True
            )
    if not args.local:
        steps.pull(step)  # psrt: evaluate what the servers hold (sync: after every step)
    model.eval()
    with torch.no_grad():
        logits = model(*(torch.from_numpy(t) for t in test[:2]))
    accuracy = float(((logits > 0).numpy() == (test[2] > 0.5)).mean())
    print(f"test_accuracy={accuracy:.5f} examples={test[2].size}", flush=True)
    if args.ddp:
        crc = 0
        for tensor in model.mlp.module.state_dict().values():
            crc = zlib.crc32(tensor.detach().contiguous().numpy().tobytes(), crc)
        print(f"dense_crc32={crc:08x}", flush=True)
        torch.distributed.destroy_process_group()


def join_process_group(cluster, info):
    """torch.distributed's Gloo group of the workers: torchrun's
    MASTER_ADDR/MASTER_PORT, else TF_CONFIG's (or --cluster's) worker 0.
    Gloo listens on the interface holding this worker's own TF_CONFIG
    address (GLOO_SOCKET_IFNAME, unless set): its default, the machine's
    host name, may resolve to an address the other hosts cannot reach."""
    import torch.distributed as dist

    spec = json.loads(cluster or os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    workers = spec.get("chief", []) + spec.get("worker", [])
    if "MASTER_ADDR" in os.environ:
        init = "env://"
    elif len(workers) < info.world_size:
        raise SystemExit(
            "--ddp needs torchrun's MASTER_ADDR/MASTER_PORT or a cluster spec listing "
            f"{info.world_size} workers (it lists {len(workers)})"
        )
    else:
        init = f"tcp://{workers[0]}"
    if "GLOO_SOCKET_IFNAME" not in os.environ and info.rank < len(workers):
        interface = interface_of(workers[info.rank].rsplit(":", 1)[0])
        if interface:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    # A worker that never joins (or dies) fails the others within 2 minutes.
    dist.init_process_group(
        "gloo",
        init_method=init,
        rank=info.rank,
        world_size=info.world_size,
        timeout=datetime.timedelta(minutes=2),
    )


def interface_of(host):
    """The network interface holding `host`'s IPv4 address, or None."""
    import fcntl
    import socket
    import struct

    try:
        address = socket.gethostbyname(host)
    except OSError:
        return None
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                # SIOCGIFADDR: the interface's IPv4 address.
                answer = fcntl.ioctl(
                    probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode())
                )
            except OSError:
                continue
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    finally:
        probe.close()
    return None


if __name__ == "__main__":
    main()
