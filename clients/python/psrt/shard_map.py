"""The catalog's layout, computed by the C++ code the servers run
(partitioner/shard_map.h, variable_spec.h, id_hash.h)."""
import numpy as np

from ._proto import ps_pb2
from .client import _native, _with_spec


def normalize(spec: ps_pb2.VariableSpec) -> ps_pb2.VariableSpec:
    """`spec` as the servers normalize it; ValueError naming what is wrong."""
    return ps_pb2.VariableSpec.FromString(_native.normalize(spec.SerializeToString()))


def mix_id(ids) -> np.ndarray:
    """The protocol's id hash of each id (uint64), as HASH routing uses it."""
    return _native.mix_id(np.asarray(ids, dtype=np.int64).reshape(-1))


class ShardMap:
    """Variables placed on `num_ps` PS as the servers place them: find(name)
    gives a layout (name, kind, spec, rows, row_width, shards, shard_of)."""

    def __init__(self, num_ps: int = 1) -> None:
        self._map = _native.ShardMap(num_ps)

    @classmethod
    def from_listing(cls, response: ps_pb2.ListVariablesResponse) -> "ShardMap":
        shard_map = cls(response.num_ps)
        for info in response.variables:
            shard_map.add(info.spec)
        return shard_map

    def add(self, spec: ps_pb2.VariableSpec) -> None:
        self._map.add(spec.SerializeToString())

    def find(self, name: str):
        return _with_spec(self._map.find(name))

    @property
    def variables(self):
        return [_with_spec(v) for v in self._map.variables]
