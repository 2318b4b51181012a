"""The protocol's id hash and routing, as the package computes them, against
testdata/wire_golden.txt, which tests/wire_golden_test.cc checks the C++
code against too (its Frame bytes there): the file is the contract."""
import os

import numpy as np

import psrt

GOLDEN = os.path.join(os.environ.get("PSRT_TESTDATA", "testdata"), "wire_golden.txt")


def vectors(kind):
    with open(GOLDEN) as f:
        rows = [line.split() for line in f if line.strip() and not line.startswith("#")]
    out = [r[1:] for r in rows if r[0] == kind]
    assert out, f"no {kind} vectors in {GOLDEN}"
    return out


def test_id_hash():
    for id_, expected in vectors("mix_id"):
        assert int(psrt.mix_id([int(id_)])[0]) == int(expected, 16), id_


def test_routing():
    for routing, rows, shards, id_, expected in vectors("route"):
        spec = psrt.ps_pb2.VariableSpec(
            name="v",
            shape=[int(rows), 4],
            kind=psrt.ps_pb2.HASH_EMBEDDING if routing == "HASH" else psrt.ps_pb2.EMBEDDING,
        )
        spec.partition.routing = getattr(psrt.ps_pb2.PartitionSpec, routing)
        spec.partition.num_shards = int(shards)
        spec.optimizer.learning_rate = 0.1
        shard_map = psrt.ShardMap(1)
        shard_map.add(spec)
        layout = shard_map.find("v")
        got = int(layout.shard_of(np.array([int(id_)], dtype=np.int64))[0])
        assert got == int(expected), (routing, rows, shards, id_)
