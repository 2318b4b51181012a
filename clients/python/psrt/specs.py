"""Helpers that build VariableSpec messages with readable arguments.

num_shards=0 with max_shard_bytes=0 means one shard (as in C++); a model
that should spread a table over every PS passes num_shards=client.num_ps."""
from ._proto import ps_pb2

_OPTIMIZERS = {"sgd": 0, "momentum": 1, "adagrad": 2, "adam": 3, "ftrl": 4}
_INITIALIZERS = {
    "zeros": 0,
    "constant": 1,
    "uniform": 2,
    "normal": 3,
    "truncated_normal": 4,
}


def _spec(name, kind, shape, placed, trained, **params):
    num_shards, max_shard_bytes, routing, placement = placed
    optimizer, learning_rate, initializer, seed = trained
    s = ps_pb2.VariableSpec(name=name, kind=kind, shape=list(shape))
    s.partition.num_shards = num_shards
    s.partition.max_shard_bytes = max_shard_bytes
    s.partition.routing = {"div": 0, "mod": 1, "hash": 2}[routing]
    s.partition.placement = {"round_robin": 0, "greedy_bytes": 1}[placement]
    if optimizer not in _OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(_OPTIMIZERS)}, got {optimizer!r}")
    s.optimizer.kind = _OPTIMIZERS[optimizer]
    s.optimizer.learning_rate = learning_rate
    init_kind, init_args = initializer if isinstance(initializer, tuple) else (initializer, {})
    s.initializer.kind = _INITIALIZERS[init_kind]
    s.initializer.seed = seed
    for k, v in init_args.items():
        setattr(s.initializer, k, v)
    for k, v in params.items():
        setattr(s.optimizer, k, v)
    return s


def dense(
    name,
    shape,
    num_shards=0,
    max_shard_bytes=0,
    placement="round_robin",
    optimizer="sgd",
    learning_rate=0.01,
    initializer="zeros",
    seed=0,
    **optimizer_params,
) -> ps_pb2.VariableSpec:
    placed = (num_shards, max_shard_bytes, "div", placement)
    trained = (optimizer, learning_rate, initializer, seed)
    return _spec(name, ps_pb2.DENSE, shape, placed, trained, **optimizer_params)


def embedding(
    name,
    vocab,
    dim,
    num_shards=0,
    max_shard_bytes=0,
    routing="div",
    placement="round_robin",
    optimizer="adagrad",
    learning_rate=0.05,
    initializer="zeros",
    seed=0,
    **optimizer_params,
) -> ps_pb2.VariableSpec:
    placed = (num_shards, max_shard_bytes, routing, placement)
    trained = (optimizer, learning_rate, initializer, seed)
    return _spec(name, ps_pb2.EMBEDDING, (vocab, dim), placed, trained, **optimizer_params)


def hash_embedding(
    name,
    dim,
    capacity=0,
    num_shards=0,
    placement="round_robin",
    optimizer="adagrad",
    learning_rate=0.05,
    initializer="zeros",
    seed=0,
    admission_min_count=0,
    admission_sketch_width=0,
    unadmitted_zeros=False,
    eviction_ttl_steps=0,
    eviction_max_rows=0,
    ssd_tier=False,
    ssd_tier_path="",
    **optimizer_params,
) -> ps_pb2.VariableSpec:
    """A HASH_EMBEDDING: rows keyed by any int64 id, created on first push.

    admission_min_count=N (> 1): an id gets a trained row only once pushes
    carried it N times (counted per shard in a count-min sketch of
    4 x admission_sketch_width 1-byte counters, default 2**20); gradients
    before that are dropped and counted, and pulls return the initial value
    (zeros with unadmitted_zeros=True). See AdmissionSpec in proto/ps.proto.

    eviction_ttl_steps=T (> 0): rows no push updated for T global steps are
    dropped by the servers' background sweep (EvictionSpec).

    eviction_max_rows=M (> 0): the table keeps at most M rows
    (ceil(M / num_shards) per shard); new ids evict the least recently
    updated rows instead of failing (EvictionSpec.max_rows).

    ssd_tier=True: rows that eviction (or ps_server --memory_budget_mb)
    takes out of memory go to the servers' SSD tier instead of being
    dropped, and a push that carries the id brings the row back with its
    optimizer slots (StorageSpec; ssd_tier_path names the directory under
    ps_server --ssd_tier_dir, default "variable-<catalog index>").
    """
    placed = (num_shards, 0, "hash", placement)
    trained = (optimizer, learning_rate, initializer, seed)
    kind, shape = ps_pb2.HASH_EMBEDDING, (capacity, dim)
    spec = _spec(name, kind, shape, placed, trained, **optimizer_params)
    if admission_min_count:
        spec.admission.min_count = admission_min_count
        spec.admission.sketch_width = admission_sketch_width
        spec.admission.unadmitted_value = (
            ps_pb2.AdmissionSpec.ZEROS if unadmitted_zeros else ps_pb2.AdmissionSpec.INITIAL_VALUE
        )
    if eviction_ttl_steps:
        spec.eviction.ttl_steps = eviction_ttl_steps
    if eviction_max_rows:
        spec.eviction.max_rows = eviction_max_rows
    if ssd_tier_path and not ssd_tier:
        raise ValueError("ssd_tier_path needs ssd_tier=True")
    if ssd_tier:
        spec.storage.tier = ps_pb2.StorageSpec.SSD
        spec.storage.path = ssd_tier_path
    return spec
