"""Variable specs and the shard map. Specs are checked and completed here as
partitioner/variable_spec.cc does (a bad spec is a ValueError before anything
is sent); where each shard lives is not recomputed: the client takes the
servers' own layout (ListVariables with_layout), and only routes ids to
shards by the protocol's rules (DIV, MOD, HASH with mix_id), which
testdata/wire_golden.json pins for both languages."""
import math

import numpy as np

from ._proto import ps_pb2

MAX_SHARDS = 65536
UNBOUNDED_HASH_ROWS_FOR_PLACEMENT = 1 << 20
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:")

DENSE, EMBEDDING, HASH_EMBEDDING = (
    ps_pb2.DENSE,
    ps_pb2.EMBEDDING,
    ps_pb2.HASH_EMBEDDING,
)
P = ps_pb2.PartitionSpec
Opt = ps_pb2.OptimizerSpec


def num_slots(optimizer_kind):
    return {Opt.SGD: 0, Opt.MOMENTUM: 1, Opt.ADAGRAD: 1, Opt.ADAM: 2, Opt.FTRL: 2}.get(
        optimizer_kind, 0
    )


def num_rows(spec):
    return spec.shape[0] if len(spec.shape) else 1


def row_width(spec):
    return int(np.prod(spec.shape[1:], dtype=np.int64)) if len(spec.shape) > 1 else 1


def _normalize_admission(spec, bad):
    """As the servers' NormalizeVariableSpec: the same spec, byte for byte."""
    if not spec.HasField("admission"):
        return
    a = spec.admission
    if spec.kind != HASH_EMBEDDING:
        bad(
            "admission applies to HASH_EMBEDDING variables only "
            "(a known vocabulary has every row already)"
        )
    if not 0 <= a.min_count <= 255:
        bad(f"admission.min_count = {a.min_count} must be in [0, 255]")
    if a.min_count <= 1:
        spec.ClearField("admission")
        return
    if a.sketch_width == 0:
        a.sketch_width = 1 << 20
    if not 64 <= a.sketch_width <= 1 << 28:
        bad(f"admission.sketch_width = {a.sketch_width} must be in [64, 2^28] (0: 2^20)")
    width = 64
    while width < a.sketch_width:
        width <<= 1
    a.sketch_width = width


def _normalize_storage(spec, bad):
    """StorageSpec, as partitioner/variable_spec.cc checks it."""
    if not spec.HasField("storage"):
        return
    storage = spec.storage
    if storage.tier not in (ps_pb2.StorageSpec.MEMORY, ps_pb2.StorageSpec.SSD):
        bad(f"unknown storage.tier {storage.tier}")
    if storage.tier == ps_pb2.StorageSpec.MEMORY:
        if storage.path:
            bad("storage.path applies to the SSD tier only")
        spec.ClearField("storage")
        return
    if spec.kind != HASH_EMBEDDING:
        bad(
            "storage.tier = SSD applies to HASH_EMBEDDING variables only "
            "(other variables are preallocated in memory)"
        )
    path = storage.path
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if len(path) > 128 or path in (".", "..") or not set(path) <= allowed:
        bad(
            f"storage.path '{path}' must be one directory name of at most 128 "
            "letters, digits, '.', '_' or '-' (it is created under ps_server "
            "--ssd_tier_dir)"
        )


def normalize(spec):
    """Validates `spec` and fills the defaults the servers fill (in place);
    ValueError names the variable and the problem."""
    name = spec.name

    def bad(what):
        raise ValueError(f"variable '{name}': {what}")

    if not name:
        raise ValueError("variable name must not be empty")
    if len(name) > 256:
        bad("name longer than 256")
    if any(c not in _NAME_CHARS for c in name):
        bad("name may hold only letters, digits and _ - . / :")
    elements = 1.0
    for i, d in enumerate(spec.shape):
        capacity = spec.kind == HASH_EMBEDDING and i == 0
        if d < (0 if capacity else 1):
            bad(f"shape[{i}] = {d} must be positive")
        elements *= max(d, 1)
    if elements > 1e15:
        bad("more than 1e15 elements")
    p = spec.partition
    if spec.kind == DENSE:
        if p.routing != P.DIV:
            bad("DENSE variables are split by row ranges; routing must be DIV")
    elif spec.kind == EMBEDDING:
        if len(spec.shape) != 2:
            bad("EMBEDDING shape must be [vocab, dim]")
        if p.routing == P.HASH:
            bad("EMBEDDING routing must be DIV or MOD; use HASH_EMBEDDING for hashed ids")
    elif spec.kind == HASH_EMBEDDING:
        if len(spec.shape) != 2:
            bad("HASH_EMBEDDING shape must be [capacity, dim] (capacity 0 = unbounded)")
        p.routing = P.HASH
        if p.max_shard_bytes > 0 and spec.shape[0] == 0:
            bad("max_shard_bytes needs a bounded capacity (shape[0]); use num_shards instead")
    else:
        bad("kind must be DENSE, EMBEDDING or HASH_EMBEDDING")
    _normalize_admission(spec, bad)
    if spec.HasField("eviction"):
        if spec.kind != HASH_EMBEDDING:
            bad(
                "eviction applies to HASH_EMBEDDING variables only "
                "(a known vocabulary keeps every row)"
            )
        if spec.eviction.ttl_steps < 0:
            bad(f"eviction.ttl_steps = {spec.eviction.ttl_steps} must not be negative")
        max_rows = spec.eviction.max_rows
        if max_rows < 0:
            bad(f"eviction.max_rows = {max_rows} must not be negative")
        if max_rows > 0 and spec.shape[0] > 0 and max_rows > spec.shape[0]:
            bad(
                f"eviction.max_rows = {max_rows} is above shape[0] = {spec.shape[0]}, "
                "the table's hard capacity: use shape[0] = 0 (unbounded) or a "
                "max_rows within it"
            )
        if spec.eviction.ttl_steps == 0 and max_rows == 0:
            spec.ClearField("eviction")
    _normalize_storage(spec, bad)
    if p.num_shards < 0 or p.max_shard_bytes < 0:
        bad("num_shards and max_shard_bytes must not be negative")
    if p.num_shards > 0 and p.max_shard_bytes > 0:
        bad("set num_shards or max_shard_bytes, not both")
    if p.num_shards > MAX_SHARDS:
        bad("more than 65536 shards")
    init = spec.initializer
    Init = ps_pb2.InitializerSpec
    if not all(math.isfinite(v) for v in (init.value, init.min, init.max, init.mean, init.stddev)):
        bad("initializer parameters must be finite")
    if init.kind == Init.UNIFORM and not init.min < init.max:
        bad(f"uniform initializer needs min < max, got [{init.min}, {init.max})")
    if init.kind in (Init.NORMAL, Init.TRUNCATED_NORMAL) and not init.stddev > 0:
        bad("normal initializer needs stddev > 0")
    opt = spec.optimizer
    if not (opt.learning_rate > 0 and math.isfinite(opt.learning_rate)):
        bad(f"optimizer learning_rate must be > 0, got {opt.learning_rate}")
    if opt.kind == Opt.MOMENTUM:
        if opt.momentum == 0:
            opt.momentum = 0.9
        if not 0 < opt.momentum < 1:
            bad("momentum must be in (0, 1)")
    elif opt.kind in (Opt.ADAGRAD, Opt.FTRL):
        if opt.initial_accumulator_value == 0:
            opt.initial_accumulator_value = 0.1
        if not opt.initial_accumulator_value > 0:
            bad("initial_accumulator_value must be > 0")
        if opt.l1 < 0 or opt.l2 < 0 or opt.beta < 0:
            bad("l1, l2 and beta must not be negative")
    elif opt.kind == Opt.ADAM:
        if opt.beta1 == 0:
            opt.beta1 = 0.9
        if opt.beta2 == 0:
            opt.beta2 = 0.999
        if opt.epsilon == 0:
            opt.epsilon = 1e-7
        if not (0 < opt.beta1 < 1 and 0 < opt.beta2 < 1 and opt.epsilon > 0):
            bad("adam needs 0 < beta1, beta2 < 1 and epsilon > 0")
    return spec


def mix_id(ids):
    """MurmurHash3's 64-bit finalizer on int64 ids (vectorized), as
    partitioner/id_hash.h."""
    k = np.asarray(ids, dtype=np.int64).view(np.uint64).copy()
    with np.errstate(over="ignore"):
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xFF51AFD7ED558CCD)
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xC4CEB9FE1A85EC53)
        k ^= k >> np.uint64(33)
    return k


class Shard:
    __slots__ = ("shard", "ps_task", "row_begin", "num_rows")

    def __init__(self, shard, ps_task, row_begin, num_rows):
        self.shard, self.ps_task = shard, ps_task
        self.row_begin, self.num_rows = row_begin, num_rows

    def __repr__(self):
        return (
            f"Shard({self.shard}, ps={self.ps_task}, rows=[{self.row_begin}, " f"+{self.num_rows}))"
        )


class VariableLayout:
    def __init__(self, spec, index, shards):
        self.spec = spec
        self.index = index
        self.rows = num_rows(spec)
        self.row_width = row_width(spec)
        self.num_slots = num_slots(spec.optimizer.kind)
        self.shards = shards

    @classmethod
    def from_info(cls, info, index):
        """The layout a PS reported (a VariableInfo listed with_layout)."""
        shards = [Shard(s.shard, s.ps_task, s.row_begin, s.num_rows) for s in info.layout]
        if not shards or [s.shard for s in shards] != list(range(len(shards))):
            raise ValueError(
                f"variable '{info.spec.name}': the server listed no complete "
                f"layout ({len(shards)} shards)"
            )
        return cls(info.spec, index, shards)

    @property
    def name(self):
        return self.spec.name

    @property
    def kind(self):
        return self.spec.kind

    def shard_of(self, ids):
        """Shard of each global row/id (numpy int64 array)."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(self.shards)
        routing = self.spec.partition.routing
        if routing == P.DIV:
            q, extra = divmod(self.rows, n)
            big = extra * (q + 1)
            small = extra + (ids - big) // max(q, 1)
            return np.where(ids < big, ids // (q + 1), small)
        if routing == P.MOD:
            return ids % n
        return (mix_id(ids) % np.uint64(n)).astype(np.int64)


class ShardMap:
    """The ordered catalog with every variable's layout, as the servers
    report it."""

    def __init__(self, variables=()):
        self.variables = list(variables)
        self.by_name = {v.name: v for v in self.variables}

    @classmethod
    def from_listing(cls, response):
        """From a ListVariablesResponse requested with_layout."""
        return cls(VariableLayout.from_info(info, i) for i, info in enumerate(response.variables))

    def find(self, name):
        return self.by_name.get(name)
