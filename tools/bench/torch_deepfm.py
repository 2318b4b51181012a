#!/usr/bin/python3
"""Single-process PyTorch DeepFM: the baseline for ps_worker's throughput,
written as a performance-minded PyTorch user would write it.

The same architecture as psrt's deepfm model (a linear term and k-dim
factors per id, FM interactions, an MLP over the value-scaled factors of the
39 fields), the same optimizers (Adagrad with accumulator 0.1 on the
embeddings, Adam on the dense layers), the same batch size, on the same
TFRecord files. What makes it a fair baseline rather than a slow one:
- the linear weights and the factors are one [vocab, 1 + k] table; each step
  gathers the batch's unique rows once (torch.unique), and Adagrad updates
  only those rows (no sparse-gradient machinery);
- the MLP runs as 1x1 convolutions, which Debian's PyTorch sends through
  oneDNN, while nn.Linear goes to its reference BLAS (~10x slower here);
  --mlp=linear keeps nn.Linear for comparison;
- the thread count is the fastest of 1..cores, measured on a throwaway
  model first (--threads=0), since all cores is not always fastest on a
  shared machine;
- data is read and ids remapped to a dense vocabulary before timing;
- on a GPU, --update=table (Adagrad over the whole table with a dense
  gradient: rows without gradient keep their value and accumulator, so the
  same math as --update=rows) skips torch.unique's sort and its wait for the
  device, which is faster there while the table fits; one step runs before
  the clock starts (CUDA and cuBLAS start-up not timed).
It runs exactly --steps steps (or --epochs) and prints the test AUC on
held-out data (--test), so a fast baseline that does not learn shows.

    /usr/bin/python3 tools/bench/torch_deepfm.py --train 'out/ctr_data/train-*' \
        --test out/ctr_data/test.tfrecords --steps 300
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def example_class():
    """tf.Example from proto/tf_example.proto, compiled by protoc now."""
    out = tempfile.mkdtemp()
    subprocess.check_call(
        [
            "protoc",
            f"--proto_path={ROOT}",
            f"--python_out={out}",
            os.path.join(ROOT, "proto/tf_example.proto"),
        ]
    )
    sys.path.insert(0, out)
    from proto import tf_example_pb2  # noqa: E402

    return tf_example_pb2.Example


def read_libsvm(pattern, fields):
    """Lines of `label id:value ...` with exactly `fields` pairs."""
    rows = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            text = f.read().replace(":", " ")
        rows.append(np.array(text.split(), np.float64).reshape(-1, 1 + 2 * fields))
    a = np.concatenate(rows)
    return (a[:, 0].astype(np.float32), a[:, 1::2].astype(np.int64), a[:, 2::2].astype(np.float32))


def read_tfrecords(pattern, fields):
    Example = example_class()
    labels, ids, values = [], [], []
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            record = data[pos + 12 : pos + 12 + length]
            pos += 12 + length + 4
            e = Example.FromString(record).features.feature
            labels.append(e["label"].float_list.value[0])
            ids.append(e["ids"].int64_list.value)
            values.append(e["values"].float_list.value)
    return (
        np.asarray(labels, np.float32),
        np.asarray(ids, np.int64).reshape(-1, fields),
        np.asarray(values, np.float32).reshape(-1, fields),
    )


class DeepFM:
    """DeepFM with one table of [linear weight | k factors] per id."""

    def __init__(
        self, vocab, fields, k, hidden, mlp, device, update="rows", lr_sparse=0.05, lr_dense=0.001
    ):
        torch.manual_seed(1)
        # One extra row for ids never seen in training (test time).
        factors = torch.nn.init.trunc_normal_(torch.empty(vocab + 1, k), std=0.01)
        self.table = torch.cat([torch.zeros(vocab + 1, 1), factors], 1).to(device)
        self.accumulator = torch.full_like(self.table, 0.1)
        self.lr_sparse = lr_sparse
        self.update = update
        self.mlp_kind = mlp
        layers, width = [], fields * k
        for h in hidden:
            layers += [
                torch.nn.Conv1d(width, h, 1) if mlp == "conv1x1" else torch.nn.Linear(width, h),
                torch.nn.ReLU(),
            ]
            width = h
        layers.append(
            torch.nn.Conv1d(width, 1, 1) if mlp == "conv1x1" else torch.nn.Linear(width, 1)
        )
        self.mlp = torch.nn.Sequential(*layers).to(device)
        self.bias = torch.nn.Parameter(torch.zeros(1, device=device))
        self.dense = torch.optim.Adam(list(self.mlp.parameters()) + [self.bias], lr=lr_dense)
        self.loss_fn = torch.nn.BCEWithLogitsLoss()

    def logits(self, rows, inverse, values):
        r = rows[inverse]  # [B, F, 1 + k]
        linear = (r[..., 0] * values).sum(1)
        v = r[..., 1:] * values.unsqueeze(-1)  # [B, F, k]
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1)
        x = v.flatten(1)
        deep = self.mlp(x.unsqueeze(-1)) if self.mlp_kind == "conv1x1" else self.mlp(x)
        return self.bias + linear + fm + deep.reshape(-1)

    def step(self, ids, values, labels):
        if self.update == "table":
            return self.step_whole_table(ids, values, labels)
        unique, inverse = torch.unique(ids, return_inverse=True)
        rows = self.table[unique].requires_grad_()
        loss = self.loss_fn(self.logits(rows, inverse, values), labels)
        self.dense.zero_grad()
        loss.backward()
        self.dense.step()
        with torch.no_grad():  # Adagrad, touched rows only
            g = rows.grad
            acc = self.accumulator[unique] + g * g
            self.accumulator[unique] = acc
            self.table[unique] = rows.detach() - self.lr_sparse * g / acc.sqrt()
        return loss

    def step_whole_table(self, ids, values, labels):
        table = self.table.requires_grad_()
        loss = self.loss_fn(self.logits(table, ids, values), labels)
        self.dense.zero_grad()
        table.grad = None
        loss.backward()
        self.dense.step()
        with torch.no_grad():  # Adagrad; untouched rows: g = 0, nothing changes
            g = table.grad
            self.accumulator.addcmul_(g, g)
            table.addcdiv_(g, self.accumulator.sqrt(), value=-self.lr_sparse)
        table.requires_grad_(False)
        return loss

    @torch.no_grad()
    def predict(self, ids, values, batch=8192):
        out = []
        for b in range(0, len(ids), batch):
            unique, inverse = torch.unique(ids[b : b + batch], return_inverse=True)
            out.append(
                torch.sigmoid(self.logits(self.table[unique], inverse, values[b : b + batch]))
            )
        return torch.cat(out).cpu().numpy()


def auc(labels, scores):
    """Area under the ROC curve (ties share their mean rank)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def load(pattern, fields):
    """(labels, ids, values), cached beside the files as .npz."""
    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(f"torch_deepfm: no files match {pattern}")
    tag = os.path.basename(pattern).replace("*", "all")
    cache = os.path.join(os.path.dirname(files[0]), f"torch_deepfm_{tag}.npz")
    if os.path.exists(cache):
        a = np.load(cache)
        return a["labels"], a["ids"], a["values"]
    read = read_libsvm if files[0].endswith(".libsvm") else read_tfrecords
    labels, ids, values = read(pattern, fields)
    np.savez(cache, labels=labels, ids=ids, values=values)
    return labels, ids, values


def fastest_threads(make_model, batches, steps=15):
    """The intra-op thread count of 1..cores that runs `steps` steps fastest,
    each trial on a fresh model."""
    best = (float("inf"), 1)
    for threads in range(1, (os.cpu_count() or 1) + 1):
        torch.set_num_threads(threads)
        model = make_model()
        model.step(*batches(0))  # warm-up
        start = time.time()
        for i in range(steps):
            loss = model.step(*batches(i + 1))
        loss.item()  # waits for the device
        best = min(best, ((time.time() - start) / steps, threads))
        print(
            f"torch_deepfm: {threads} thread(s): {1000 * (time.time() - start) / steps:.1f} "
            "ms per step",
            flush=True,
        )
    return best[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True)
    p.add_argument("--test", default="", help="held-out files: prints the test AUC")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="exactly this many steps (0: --epochs)")
    p.add_argument(
        "--max_examples",
        type=int,
        default=0,
        help="same as --steps=ceil(max_examples / batch_size)",
    )
    p.add_argument("--batch_size", type=int, default=1024)
    p.add_argument("--fields", type=int, default=39)
    p.add_argument("--embedding_dim", type=int, default=8)
    p.add_argument("--hidden", default="200,200")
    p.add_argument(
        "--mlp",
        default="conv1x1",
        choices=["conv1x1", "linear"],
        help="conv1x1: oneDNN; linear: nn.Linear (Debian: reference BLAS)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="intra-op threads (0: the fastest of 1..cores, measured first)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument(
        "--update",
        default="rows",
        choices=["rows", "table"],
        help="rows: torch.unique, Adagrad on the touched rows; table: dense gradient of "
        "the whole table, Adagrad over all of it (same result; faster on a GPU)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    t0 = time.time()
    labels, ids, values = load(args.train, args.fields)
    vocab, inverse = np.unique(ids, return_inverse=True)
    device = torch.device(args.device)
    ids_t = torch.from_numpy(inverse.reshape(ids.shape)).to(device)
    values_t, labels_t = torch.from_numpy(values).to(device), torch.from_numpy(labels).to(device)
    n = len(labels)
    steps = args.steps or (
        -(-args.max_examples // args.batch_size)
        if args.max_examples
        else args.epochs * -(-n // args.batch_size)
    )
    hidden = [int(h) for h in args.hidden.split(",")]
    print(
        f"torch_deepfm: {n} examples, {len(vocab)} distinct ids, read in "
        f"{time.time() - t0:.1f} s; torch {torch.__version__}, mlp {args.mlp}",
        flush=True,
    )

    gen = torch.Generator().manual_seed(2)
    orders = []

    def batch(i):
        epoch, b = divmod(i * args.batch_size, n)
        while len(orders) <= epoch:
            orders.append(torch.randperm(n, generator=gen).to(device))
        idx = orders[epoch][b : b + args.batch_size]
        return ids_t[idx], values_t[idx], labels_t[idx]

    def make_model():
        return DeepFM(
            len(vocab), args.fields, args.embedding_dim, hidden, args.mlp, device, args.update
        )

    threads = args.threads or (fastest_threads(make_model, batch) if device.type == "cpu" else 1)
    torch.set_num_threads(threads)
    model = make_model()
    if device.type == "cuda":  # CUDA, cuBLAS and the allocator start outside the clock
        warm = make_model()
        warm.step(*batch(0)).item()
        del warm
    examples = 0
    start = time.time()
    for i in range(steps):
        ids_b, values_b, labels_b = batch(i)
        loss = model.step(ids_b, values_b, labels_b)
        examples += len(labels_b)
    loss.item()  # waits for the device
    seconds = time.time() - start
    rate = examples / seconds
    print(
        f"torch_deepfm: {steps} steps, {examples} examples in {seconds:.1f} s "
        f"({threads} threads): examples/s={rate:.1f} last loss={loss.item():.4f}",
        flush=True,
    )
    test_auc = None
    if args.test:
        t_labels, t_ids, t_values = load(args.test, args.fields)
        pos = np.searchsorted(vocab, t_ids)
        known = (pos < len(vocab)) & (vocab[np.minimum(pos, len(vocab) - 1)] == t_ids)
        mapped = np.where(known, pos, len(vocab))  # unseen ids: the extra row
        scores = model.predict(
            torch.from_numpy(mapped).to(device), torch.from_numpy(t_values).to(device)
        )
        test_auc = float(auc(t_labels, scores))
        print(f"torch_deepfm: test examples={len(t_labels)} auc={test_auc:.5f}", flush=True)
    if args.json:
        print(
            json.dumps(
                {
                    "system": "pytorch-single-process",
                    "device": args.device,
                    "mlp": args.mlp,
                    "update": args.update,
                    "threads": threads,
                    "steps": steps,
                    "examples": examples,
                    "seconds": seconds,
                    "examples_per_s": rate,
                    "test_auc": test_auc,
                }
            )
        )


if __name__ == "__main__":
    main()
