#!/usr/bin/python3
"""Single-process PyTorch DeepFM: the baseline for ps_worker's throughput.

The same architecture as psrt's deepfm model (a linear term and k-dim
factors per id, FM interactions, an MLP over the value-scaled factors of the
39 fields), the same optimizers (Adagrad on the embeddings, sparse; Adam on
the dense layers), the same batch size, on the same TFRecord files. Ids are
remapped to a dense vocabulary first (as a PyTorch user would); reading and
remapping are not timed.

    /usr/bin/python3 tools/bench/torch_deepfm.py --train 'out/ctr_data/train-*' --epochs 1
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
    subprocess.check_call(["protoc", f"--proto_path={ROOT}", f"--python_out={out}",
                           os.path.join(ROOT, "proto/tf_example.proto")])
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
    return (a[:, 0].astype(np.float32), a[:, 1::2].astype(np.int64),
            a[:, 2::2].astype(np.float32))


def read_tfrecords(pattern, fields):
    Example = example_class()
    labels, ids, values = [], [], []
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            record = data[pos + 12:pos + 12 + length]
            pos += 12 + length + 4
            e = Example.FromString(record).features.feature
            labels.append(e["label"].float_list.value[0])
            ids.append(e["ids"].int64_list.value)
            values.append(e["values"].float_list.value)
    return (np.asarray(labels, np.float32), np.asarray(ids, np.int64).reshape(-1, fields),
            np.asarray(values, np.float32).reshape(-1, fields))


class DeepFM(torch.nn.Module):
    def __init__(self, vocab, fields, k, hidden, sparse):
        super().__init__()
        self.linear = torch.nn.Embedding(vocab, 1, sparse=sparse)
        self.factors = torch.nn.Embedding(vocab, k, sparse=sparse)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.trunc_normal_(self.factors.weight, std=0.01)
        self.bias = torch.nn.Parameter(torch.zeros(1))
        layers, width = [], fields * k
        for h in hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
            width = h
        layers.append(torch.nn.Linear(width, 1))
        self.mlp = torch.nn.Sequential(*layers)

    def forward(self, ids, values):
        linear = (self.linear(ids).squeeze(-1) * values).sum(1)
        v = self.factors(ids) * values.unsqueeze(-1)            # [B, F, k]
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1)
        deep = self.mlp(v.flatten(1)).squeeze(-1)
        return self.bias + linear + fm + deep


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=1024)
    p.add_argument("--fields", type=int, default=39)
    p.add_argument("--embedding_dim", type=int, default=8)
    p.add_argument("--hidden", default="200,200")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="intra-op threads (default: every core)")
    p.add_argument("--max_examples", type=int, default=0,
                   help="stop after this many examples (0: all epochs)")
    p.add_argument("--dense_embedding_gradients", action="store_true",
                   help="dense instead of sparse embedding gradients")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    cache = os.path.join(os.path.dirname(sorted(glob.glob(args.train))[0]),
                         "torch_deepfm_cache.npz")
    if os.path.exists(cache):
        arrays = np.load(cache)
        labels, ids, values = arrays["labels"], arrays["ids"], arrays["values"]
    else:
        read = read_libsvm if args.train.endswith(".libsvm") or glob.glob(
            args.train)[0].endswith(".libsvm") else read_tfrecords
        labels, ids, values = read(args.train, args.fields)
        np.savez(cache, labels=labels, ids=ids, values=values)
    unique, inverse = np.unique(ids, return_inverse=True)
    ids = inverse.reshape(ids.shape)
    print(f"torch_deepfm: {len(labels)} examples, {len(unique)} distinct ids, "
          f"read in {time.time() - t0:.1f} s; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {args.device}", flush=True)
    device = torch.device(args.device)
    model = DeepFM(len(unique), args.fields, args.embedding_dim,
                   [int(h) for h in args.hidden.split(",")],
                   sparse=not args.dense_embedding_gradients).to(device)
    sparse = torch.optim.Adagrad(list(model.linear.parameters()) +
                                 list(model.factors.parameters()), lr=0.05,
                                 initial_accumulator_value=0.1)
    dense = torch.optim.Adam(list(model.mlp.parameters()) + [model.bias], lr=0.001)
    ids_t, values_t, labels_t = (torch.from_numpy(a).to(device)
                                 for a in (ids, values, labels))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    n = len(labels)
    start = time.time()
    examples = 0
    for epoch in range(args.epochs):
        order = torch.randperm(n, device=device)
        for b in range(0, n, args.batch_size):
            idx = order[b:b + args.batch_size]
            loss = loss_fn(model(ids_t[idx], values_t[idx]), labels_t[idx])
            sparse.zero_grad()
            dense.zero_grad()
            loss.backward()
            sparse.step()
            dense.step()
            examples += len(idx)
            if args.max_examples and examples >= args.max_examples:
                break
        print(f"torch_deepfm: epoch {epoch} loss={loss.item():.4f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.time() - start
    rate = examples / seconds
    print(f"torch_deepfm ({'dense' if args.dense_embedding_gradients else 'sparse'}"
          f" embedding gradients): {examples} examples in {seconds:.1f} s: "
          f"examples/s={rate:.1f}", flush=True)
    if args.json:
        print(json.dumps({"system": "pytorch-single-process", "device": args.device,
                          "embedding_gradients":
                              "dense" if args.dense_embedding_gradients else "sparse",
                          "examples": examples,
                          "seconds": seconds, "examples_per_s": rate}))


if __name__ == "__main__":
    main()
