"""The shard map and id hash as the bound C++ code computes them."""
import numpy as np
import pytest

import psrt


def test_mix_id_is_the_protocols_hash():
    assert int(psrt.mix_id([1])[0]) == 0xB456BCFC34C2CB2C
    assert psrt.mix_id([-1, 0, 2**62]).dtype == np.uint64


def varied_specs(num_ps):
    return [
        psrt.dense("w0", (1000, 8), num_shards=3, optimizer="adam"),
        psrt.dense("w1", (17,), num_shards=4, placement="greedy_bytes"),
        psrt.embedding("e0", 100_003, 16, num_shards=5, routing="mod", placement="greedy_bytes"),
        psrt.embedding("e1", 50_000, 4, max_shard_bytes=100_000, optimizer="ftrl"),
        psrt.hash_embedding("h0", 8, num_shards=num_ps, placement="greedy_bytes"),
        psrt.hash_embedding("h1", 8, capacity=1_000_000, num_shards=7, optimizer="momentum"),
        psrt.dense("w2", (3, 5, 7), num_shards=2, placement="greedy_bytes"),
    ]


def test_layout_comes_from_the_servers_and_matches_what_each_holds(make_cluster):
    cluster = make_cluster(3)
    client = cluster.client()
    client.create_variables(varied_specs(3))
    names = [s.name for s in varied_specs(3)]
    layouts = [client.layout(name) for name in names]
    # Placement spreads the shards (round robin and greedy by bytes).
    assert {sh.ps_task for v in layouts for sh in v.shards} == {0, 1, 2}
    assert [len(v.shards) for v in layouts] == [3, 4, 5, 8, 3, 7, 2]
    seen = {}
    for ps, listing in enumerate(client.list_variables()):
        assert [v.spec.name for v in listing.variables] == names
        for info in listing.variables:
            for shard in info.shards:
                assert shard.ps_task == ps
                seen[(info.spec.name, shard.shard)] = (
                    ps,
                    shard.row_begin,
                    shard.num_rows,
                    info.spec.kind,
                )
    # The layout PS 0 reports is the one every PS holds, shard for shard.
    for v in layouts:
        for sh in v.shards:
            ps, row_begin, rows, kind = seen.pop((v.name, sh.shard))
            assert ps == sh.ps_task, (v.name, sh.shard)
            assert row_begin == sh.row_begin
            if kind != psrt.ps_pb2.HASH_EMBEDDING:
                assert rows == sh.num_rows
    assert not seen
    # Routing: every id of e0 and h0 lands on a shard the servers accept
    # (a misrouted id is rejected with INVALID_ARGUMENT).
    ids = np.arange(0, 100_003, 97, dtype=np.int64)
    client.push_rows("e0", ids, np.ones((ids.size, 16), np.float32))
    client.push_rows("h0", np.array([-5, 0, 2**40, 12345]), np.ones((4, 8), np.float32))
    client.close()


def test_specs_are_validated_before_sending():
    with pytest.raises(ValueError, match="'bad': EMBEDDING shape"):
        psrt.normalize(psrt.ps_pb2.VariableSpec(name="bad", kind=psrt.ps_pb2.EMBEDDING, shape=[10]))
    with pytest.raises(ValueError, match="learning_rate"):
        psrt.normalize(psrt.dense("w", (3,), learning_rate=0))


def test_admission_specs_normalize_as_the_servers_do_and_admit_on_the_third_push(
    make_cluster,
):
    with pytest.raises(ValueError, match="admission.min_count = 300"):
        psrt.normalize(psrt.hash_embedding("h", 4, admission_min_count=300))
    with pytest.raises(ValueError, match="HASH_EMBEDDING variables only"):
        spec = psrt.embedding("e", 10, 4)
        spec.admission.min_count = 3
        psrt.normalize(spec)
    with pytest.raises(ValueError, match="eviction.ttl_steps = -2"):
        psrt.normalize(psrt.hash_embedding("h", 4, eviction_ttl_steps=-2))
    with pytest.raises(ValueError, match="eviction.max_rows = -1 must not be negative"):
        psrt.normalize(psrt.hash_embedding("h", 4, eviction_max_rows=-1))
    with pytest.raises(ValueError, match="eviction.max_rows = 11 is above shape.0. = 10"):
        psrt.normalize(psrt.hash_embedding("h", 4, capacity=10, eviction_max_rows=11))
    # ttl 0 is no eviction, one spelling of it (as the servers write it).
    none = psrt.normalize(psrt.hash_embedding("h", 4))
    ttl0 = psrt.hash_embedding("h", 4)
    ttl0.eviction.ttl_steps = 0
    assert psrt.normalize(ttl0).SerializeToString() == none.SerializeToString()
    spec = psrt.hash_embedding(
        "adm",
        4,
        num_shards=2,
        optimizer="sgd",
        learning_rate=1.0,
        admission_min_count=3,
        admission_sketch_width=1000,
        eviction_ttl_steps=1000,
        eviction_max_rows=5000,
    )
    cluster = make_cluster(2)
    client = cluster.client()
    client.create_variables([spec])
    # What the servers hold is what this client normalized, byte for byte
    # (creating it again is then a no-op, not a conflict).
    listed = client.list_variables()[0].variables[0].spec
    assert listed.admission.sketch_width == 1024
    assert listed.eviction.ttl_steps == 1000
    assert listed.eviction.max_rows == 5000
    assert listed.SerializeToString() == psrt.normalize(spec).SerializeToString()
    client.create_variables([spec])
    ids = np.arange(1000, 1100, dtype=np.int64)
    for _ in range(2):
        client.push_rows("adm", ids, np.ones((ids.size, 4), np.float32))
    assert np.array_equal(client.pull_rows("adm", ids), np.zeros((ids.size, 4), np.float32))
    client.push_rows("adm", ids[:40], np.full((40, 4), 0.5, np.float32))
    rows = client.pull_rows("adm", ids)
    assert np.array_equal(rows[:40], np.full((40, 4), -0.5, np.float32))
    assert np.array_equal(rows[40:], np.zeros((60, 4), np.float32))
    shards = [
        sh for listing in client.list_variables() for v in listing.variables for sh in v.shards
    ]
    assert sum(sh.num_rows for sh in shards) == 40
    assert sum(sh.admitted_rows for sh in shards) == 40
    assert sum(sh.unadmitted_gradients for sh in shards) == 200
    client.close()


def test_ssd_tier_specs_normalize_as_the_servers_do(make_cluster):
    with pytest.raises(ValueError, match="storage.path '../x' must be one directory name"):
        psrt.normalize(psrt.hash_embedding("h", 4, ssd_tier=True, ssd_tier_path="../x"))
    with pytest.raises(ValueError, match="HASH_EMBEDDING variables only"):
        spec = psrt.embedding("e", 10, 4)
        spec.storage.tier = psrt.ps_pb2.StorageSpec.SSD
        psrt.normalize(spec)
    with pytest.raises(ValueError, match="ssd_tier_path needs ssd_tier=True"):
        psrt.hash_embedding("h", 4, ssd_tier_path="x")
    spec = psrt.hash_embedding(
        "tiered",
        4,
        num_shards=2,
        optimizer="sgd",
        learning_rate=0.05,
        eviction_max_rows=100,
        ssd_tier=True,
        ssd_tier_path="t1",
    )
    cluster = make_cluster(2)
    client = cluster.client()
    client.create_variables([spec])
    listed = client.list_variables()[0].variables[0].spec
    assert listed.storage.tier == psrt.ps_pb2.StorageSpec.SSD
    assert listed.SerializeToString() == psrt.normalize(spec).SerializeToString()
    # 1,000 ids through a table that keeps 100 in memory: every pushed row
    # comes back from disk as it was pushed.
    ids = np.arange(1000, dtype=np.int64)
    for first in range(0, 1000, 40):
        chunk = ids[first : first + 40]
        client.push_rows("tiered", chunk, np.ones((chunk.size, 4), np.float32))
    rows = client.pull_rows("tiered", ids)
    assert np.array_equal(rows, np.full((1000, 4), -0.05, np.float32))
    spilled = sum(s.spilled_rows for ps in client.list_variables() for s in ps.variables[0].shards)
    assert spilled >= 850
