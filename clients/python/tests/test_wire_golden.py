"""The protocol's id hash, routing and Frame bytes against
testdata/wire_golden.txt, which tests/wire_golden_test.cc checks for the C++
side too: the file, not either implementation, is the contract."""
import os

import numpy as np
import pytest

import psrt
from psrt import frame
from psrt.shard_map import P, Shard, VariableLayout

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
        spec.partition.routing = getattr(P, routing)
        layout = VariableLayout(spec, 0, [Shard(s, 0, 0, 0) for s in range(int(shards))])
        got = int(layout.shard_of(np.array([int(id_)], dtype=np.int64))[0])
        assert got == int(expected), (routing, rows, shards, id_)


@pytest.mark.parametrize("i", range(3))
def test_frame_bytes(i):
    header, payloads, expected = vectors("frame")[i]
    header = b"" if header == "-" else bytes.fromhex(header)
    arrays = (
        []
        if payloads == "-"
        else [np.frombuffer(bytes.fromhex(p), dtype=np.uint8) for p in payloads.split(",")]
    )
    encoded = frame.encode(header, arrays)
    assert encoded.hex() == expected
    # And it decodes back to the same pieces.
    got_header, got_payloads = frame.decode(encoded)
    assert bytes(got_header) == header
    assert [bytes(p) for p in got_payloads] == [a.tobytes() for a in arrays]
