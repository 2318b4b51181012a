"""Variable specs and the shard map, computed exactly as the C++ side does
(partitioner/variable_spec.cc, partitioner/shard_map.h): placement is a pure
function of the ordered specs and the number of PS tasks, so this client, the
C++ client and every PS agree without asking each other."""
import math

import numpy as np

from ._proto import ps_pb2

MAX_SHARDS = 65536
UNBOUNDED_HASH_ROWS_FOR_PLACEMENT = 1 << 20
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:")

DENSE, EMBEDDING, HASH_EMBEDDING = (ps_pb2.DENSE, ps_pb2.EMBEDDING, ps_pb2.HASH_EMBEDDING)
P = ps_pb2.PartitionSpec
O = ps_pb2.OptimizerSpec


def num_slots(optimizer_kind):
    return {O.SGD: 0, O.MOMENTUM: 1, O.ADAGRAD: 1, O.ADAM: 2, O.FTRL: 2}.get(optimizer_kind, 0)


def num_rows(spec):
    return spec.shape[0] if len(spec.shape) else 1


def row_width(spec):
    return int(np.prod(spec.shape[1:], dtype=np.int64)) if len(spec.shape) > 1 else 1


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
    if p.num_shards < 0 or p.max_shard_bytes < 0:
        bad("num_shards and max_shard_bytes must not be negative")
    if p.num_shards > 0 and p.max_shard_bytes > 0:
        bad("set num_shards or max_shard_bytes, not both")
    if p.num_shards > MAX_SHARDS:
        bad("more than 65536 shards")
    init = spec.initializer
    I = ps_pb2.InitializerSpec
    if not all(math.isfinite(v) for v in (init.value, init.min, init.max, init.mean, init.stddev)):
        bad("initializer parameters must be finite")
    if init.kind == I.UNIFORM and not init.min < init.max:
        bad(f"uniform initializer needs min < max, got [{init.min}, {init.max})")
    if init.kind in (I.NORMAL, I.TRUNCATED_NORMAL) and not init.stddev > 0:
        bad("normal initializer needs stddev > 0")
    opt = spec.optimizer
    if not (opt.learning_rate > 0 and math.isfinite(opt.learning_rate)):
        bad(f"optimizer learning_rate must be > 0, got {opt.learning_rate}")
    if opt.kind == O.MOMENTUM:
        if opt.momentum == 0:
            opt.momentum = 0.9
        if not 0 < opt.momentum < 1:
            bad("momentum must be in (0, 1)")
    elif opt.kind in (O.ADAGRAD, O.FTRL):
        if opt.initial_accumulator_value == 0:
            opt.initial_accumulator_value = 0.1
        if not opt.initial_accumulator_value > 0:
            bad("initial_accumulator_value must be > 0")
        if opt.l1 < 0 or opt.l2 < 0 or opt.beta < 0:
            bad("l1, l2 and beta must not be negative")
    elif opt.kind == O.ADAM:
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
    __slots__ = ("shard", "ps_task", "row_begin", "num_rows", "bytes")

    def __init__(self, shard, ps_task, row_begin, num_rows, nbytes):
        self.shard, self.ps_task, self.row_begin = shard, ps_task, row_begin
        self.num_rows, self.bytes = num_rows, nbytes

    def __repr__(self):
        return (f"Shard({self.shard}, ps={self.ps_task}, rows=[{self.row_begin}, "
                f"+{self.num_rows}), bytes={self.bytes})")


class VariableLayout:
    def __init__(self, spec, index):
        self.spec = spec
        self.index = index
        self.rows = num_rows(spec)
        self.row_width = row_width(spec)
        self.num_slots = num_slots(spec.optimizer.kind)
        self.shards = []

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
    def __init__(self, num_ps):
        self.num_ps = num_ps
        self.variables = []
        self.by_name = {}
        self.load = [0] * num_ps
        self.next_round_robin = 0

    def add(self, spec):
        if spec.name in self.by_name:
            raise ValueError(f"variable '{spec.name}' is already in the map")
        v = VariableLayout(spec, len(self.variables))
        row_bytes = v.row_width * 4 * (1 + v.num_slots)
        hashed = spec.kind == HASH_EMBEDDING
        p = spec.partition
        n = 1
        if p.num_shards > 0:
            n = p.num_shards
        elif p.max_shard_bytes > 0:
            n = -(-(v.rows * v.row_width * 4) // p.max_shard_bytes)
        if not (hashed and v.rows == 0):
            n = min(n, v.rows)
        n = max(1, min(n, MAX_SHARDS))
        q, extra = divmod(v.rows, n)
        for s in range(n):
            row_begin = 0
            if hashed:
                rows = 0 if v.rows == 0 else -(-v.rows // n)
                weight = (-(-UNBOUNDED_HASH_ROWS_FOR_PLACEMENT // n)
                          if v.rows == 0 else rows)
            elif p.routing == P.MOD:
                rows = -(-(v.rows - s) // n)
                weight = rows
            else:
                row_begin = s * q + min(s, extra)
                rows = q + (1 if s < extra else 0)
                weight = rows
            nbytes = weight * row_bytes
            if p.placement == P.GREEDY_BYTES:
                ps = min(range(self.num_ps), key=lambda i: (self.load[i], i))
            else:
                ps = self.next_round_robin % self.num_ps
                self.next_round_robin += 1
            self.load[ps] += nbytes
            v.shards.append(Shard(s, ps, row_begin, rows, nbytes))
        self.by_name[spec.name] = v
        self.variables.append(v)
        return v

    def find(self, name):
        return self.by_name.get(name)
