"""PyTorch integration: keep a model's embeddings and dense weights on psrt
and change an existing training loop by a few lines.

    import psrt, psrt.torch
    client = psrt.Client(cluster)
    emb = psrt.torch.Embedding(client, "user_emb", vocab=1_000_000, dim=16,
                               optimizer="adagrad", learning_rate=0.05)
    mlp = torch.nn.Sequential(...)
    dense = psrt.torch.DenseParameters(client, mlp, prefix="mlp/",
                                       optimizer="adam", learning_rate=1e-3)
    for batch in data:
        dense.pull()                     # 1: fresh weights from the PS
        loss = loss_fn(mlp(emb(ids)), labels)
        loss.backward()                  # embedding rows push themselves
        dense.push()                     # 2: dense gradients to the PS
        mlp.zero_grad()

The optimizers run on the servers (no torch.optim); pushes are
asynchronous (Client.start_push, which runs without the GIL, so the next
step's compute overlaps it): each is waited for, and its error raised,
before the next pull of the same variables. Ids and modules may live on a
CUDA device: rows and weights cross host memory for the wire. `EmbeddingBag`
reduces bags of rows (sum, mean, max) as torch.nn.EmbeddingBag does.

Sync and SSP training (psrt.Client(mode="sync" or "ssp")) count steps: each
worker sends one push per PS per step, carrying its step. `Steps` does
that for a set of modules: it pulls the dense weights for step k, the
embeddings pull their rows for step k, and their backward gradients are
collected and pushed, with the dense ones, as one push:

    client = psrt.Client(cluster, mode="sync")   # worker from TF_CONFIG/torchrun
    steps = psrt.torch.Steps(client, [emb, dense])
    for step, batch in enumerate(data):
        steps.pull(step)                 # dense weights of step `step`
        loss = loss_fn(mlp(emb(ids)), labels)
        loss.backward()                  # rows' gradients are held
        steps.push()                     # one push: rows and dense, step `step`
        mlp.zero_grad()

(It works in async mode too.) Saving: the tables and dense variables live
on the servers with their optimizer slots, so save with the servers'
checkpoint (`client.checkpoint()`, ps_server --checkpoint_every_secs),
restore with ps_server --restore, read rows with `emb.rows(ids)`, export
with `psctl export` (docs/operations.md).
"""
import zlib

import numpy as np
import torch

from . import specs as _specs


class _Pushes:
    """The last asynchronous push of a module (a psrt.Pending)."""

    _pending = None

    def flush(self):
        """Waits for the last push (raising its error, if any)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()


class Embedding(torch.nn.Module, _Pushes):
    """An embedding table held by psrt: forward pulls the rows of the batch's
    (unique) ids; backward pushes each unique id's gradient, summed over its
    occurrences. `hash=True` makes it a hash embedding (any int64 id, rows
    created on first push; `vocab` is then the capacity, 0 = unbounded)."""

    def __init__(
        self,
        client,
        name,
        vocab,
        dim,
        hash=False,
        num_shards=None,
        optimizer="adagrad",
        learning_rate=0.05,
        initializer=None,
        seed=0,
        **optimizer_params,
    ):
        super().__init__()
        self.client, self.name, self.dim = client, name, dim
        shards = client.num_ps if num_shards is None else num_shards
        init = initializer or ("truncated_normal", {"stddev": 0.01})
        options = dict(num_shards=shards, placement="greedy_bytes", optimizer=optimizer)
        options.update(learning_rate=learning_rate, initializer=init, seed=seed)
        if hash:
            spec = _specs.hash_embedding(name, dim, capacity=vocab, **options, **optimizer_params)
        else:
            spec = _specs.embedding(name, vocab, dim, **options, **optimizer_params)
        client.create_variables([spec])
        self._steps = None  # the Steps this module takes part in, if any

    def rows(self, ids):
        """The current rows of `ids` (a float32 numpy array [len(ids), dim]),
        after this module's last push; no gradient."""
        self.flush()
        return self.client.pull_rows(self.name, np.asarray(ids, dtype=np.int64))

    def forward(self, ids):
        """Rows of `ids` (any shape; a CPU or CUDA tensor): a tensor of shape
        ids.shape + (dim,) on ids' device."""
        rows, inverse = self._pull_unique(ids)
        return rows[inverse].reshape(*ids.shape, self.dim)

    def _pull_unique(self, ids):
        """The rows of ids' unique values, on ids' device (a leaf whose
        gradient is pushed in backward), and each id's index among them."""
        self.flush()
        flat = ids.reshape(-1).to(torch.int64)
        unique, inverse = torch.unique(flat, return_inverse=True)
        unique_np = unique.cpu().numpy()  # the wire is host memory
        step = self._steps.step if self._steps is not None else 0
        rows = torch.from_numpy(self.client.pull({self.name: unique_np}, step)[self.name])
        if ids.device.type != "cpu":
            rows = rows.to(ids.device, non_blocking=True)
        if self.training and torch.is_grad_enabled():
            rows.requires_grad_(True)
            rows.register_hook(lambda grad: self._push(unique_np, grad))
        return rows, inverse

    def _push(self, ids, grad):
        g = grad.detach().to(torch.float32).contiguous().cpu().numpy().copy()
        if self._steps is not None:
            self._steps._hold_rows(self.name, ids, g)
        else:
            self._pending = self.client.start_push({self.name: (ids, g)})
        return None


class EmbeddingBag(Embedding):
    """Bags of rows reduced to one vector each, as torch.nn.EmbeddingBag:
    forward(ids, offsets=None, per_sample_weights=None) with 2-D ids (one
    bag per row) or 1-D ids cut into bags at `offsets`; mode "sum", "mean"
    or "max". Only the batch's unique rows are pulled, and backward pushes
    each unique id's gradient summed over every bag it is in. Takes the
    same arguments as Embedding, plus `mode`."""

    def __init__(self, client, name, vocab, dim, mode="mean", **kwargs):
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag mode must be sum, mean or max, got {mode!r}")
        super().__init__(client, name, vocab, dim, **kwargs)
        self.mode = mode

    def forward(self, ids, offsets=None, per_sample_weights=None):
        if ids.dim() == 2 and offsets is not None:
            raise ValueError("EmbeddingBag: 2-D ids are bags already; offsets must be None")
        if ids.dim() == 1 and offsets is None:
            raise ValueError("EmbeddingBag: 1-D ids need offsets (where each bag starts)")
        rows, inverse = self._pull_unique(ids)
        return torch.nn.functional.embedding_bag(
            inverse.reshape(ids.shape),
            rows,
            offsets,
            mode=self.mode,
            per_sample_weights=per_sample_weights,
        )


class DenseParameters(_Pushes):
    """Keeps every parameter of `module` on psrt as a dense variable named
    prefix + parameter name, with the server-side optimizer given.

    The servers initialize the variables (the first process to create them
    wins; the others get the same values): each from a uniform distribution
    with the variance of the module's own initial values (zeros where those
    are all zero), seeded by its name, so every worker starts from the same
    weights."""

    def __init__(
        self,
        client,
        module,
        prefix="",
        optimizer="adam",
        learning_rate=1e-3,
        num_shards=1,
        **optimizer_params,
    ):
        self.client = client
        self.params = [(prefix + name, p) for name, p in module.named_parameters()]
        specs = []
        for name, p in self.params:
            std = float(p.detach().std()) if p.numel() > 1 else float(p.detach().abs().sum())
            init = (
                ("uniform", {"min": -std * 3**0.5, "max": std * 3**0.5}) if std > 0 else "zeros"
            )
            specs.append(
                _specs.dense(
                    name,
                    tuple(p.shape) or (1,),
                    num_shards=min(num_shards, max(1, p.shape[0] if p.dim() else 1)),
                    optimizer=optimizer,
                    learning_rate=learning_rate,
                    initializer=init,
                    seed=zlib.crc32(name.encode()),
                    **optimizer_params,
                )
            )
        client.create_variables(specs)
        self.step = 0

    def pull(self, step=0):
        """Copies the servers' current values into the module (one batched
        pull for all parameters, after the previous push finished); `step`
        in sync and SSP modes (Steps passes it)."""
        self.flush()
        self._assign(self.client.pull({name: None for name, _ in self.params}, step))

    def push(self):
        """Sends every parameter's .grad (zeros where None) as one batched
        push, asynchronously."""
        self._pending = self.client.start_push(self._gradients(), self.step)
        self.step += 1

    def _assign(self, values):
        with torch.no_grad():
            for name, p in self.params:  # to the parameter's device
                p.copy_(torch.from_numpy(values[name]).reshape(p.shape))

    def _gradients(self):
        grads = {}
        for name, p in self.params:
            g = p.grad
            grads[name] = (
                np.zeros(p.numel(), np.float32)
                if g is None
                else g.detach().to(torch.float32).reshape(-1).cpu().numpy().copy()
            )
        return grads


class Steps(_Pushes):
    """Numbered training steps over a set of psrt modules (Embedding,
    EmbeddingBag, DenseParameters) sharing one client: what sync and SSP
    modes need, since each worker must send exactly one push per PS per
    step, with its step.

    pull(step) waits for the previous step's push, then pulls every
    DenseParameters' weights for `step`; the embeddings' forward pulls
    their rows for `step`, and their backward hands the rows' gradients to
    this object instead of pushing them; push() sends those and every
    DenseParameters' .grad as one push, asynchronously. An embedding
    called twice in a step pushes both calls' rows (repeated ids are
    summed)."""

    def __init__(self, client, modules):
        self.client = client
        self.embeddings = [m for m in modules if isinstance(m, Embedding)]
        self.dense = [m for m in modules if isinstance(m, DenseParameters)]
        unknown = [m for m in modules if not isinstance(m, (Embedding, DenseParameters))]
        if unknown:
            raise TypeError(
                f"Steps takes psrt.torch Embedding, EmbeddingBag and DenseParameters, "
                f"got {type(unknown[0]).__name__}"
            )
        for m in self.embeddings + self.dense:
            if m.client is not client:
                raise ValueError("Steps: every module must use the Steps' client")
        for m in self.embeddings:
            m._steps = self
        self.step = 0
        self._held = {}  # embedding name -> [(ids, grads)]

    def pull(self, step):
        """Begins step `step`: the previous push is waited for (its error
        raised), then the dense weights of `step` are pulled (in sync mode
        once step - 1 is applied everywhere they live)."""
        self.flush()
        self.step, self._held = int(step), {}
        names = {name: None for d in self.dense for name, _ in d.params}
        if names:
            values = self.client.pull(names, self.step)
            for d in self.dense:
                d._assign(values)

    def _hold_rows(self, name, ids, grads):
        self._held.setdefault(name, []).append((ids, grads))

    def push(self):
        """Ends the step: one push of every held row gradient and every
        dense .grad (zeros where None), with the step, asynchronously."""
        ops = {}
        for d in self.dense:
            ops.update(d._gradients())
        for name, parts in self._held.items():
            ids = np.concatenate([i for i, _ in parts])
            grads = np.concatenate([g for _, g in parts])
            ops[name] = (ids, grads)
        self._held = {}
        self._pending = self.client.start_push(ops, self.step)
