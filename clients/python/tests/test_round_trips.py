"""Dense and sparse round trips through real servers, results equal to the
C++ client's for the same pushes, and errors."""
import numpy as np
import pytest

import psrt


def test_dense_push_pull_matches_sgd_exactly(cluster2):
    client = cluster2.client()
    # 4M floats over 3 shards on 2 PS: pushes and pulls are split into
    # many messages.
    client.create_variables(
        [psrt.dense("big", (1 << 20, 4), num_shards=3, optimizer="sgd", learning_rate=0.5)]
    )
    assert np.count_nonzero(client.pull_dense("big")) == 0
    rng = np.random.default_rng(1)
    grad = rng.integers(-8, 8, size=(1 << 20, 4)).astype(np.float32)
    client.push_dense("big", grad)
    pulled = client.pull_dense("big")
    assert pulled.shape == (1 << 20, 4)
    assert np.array_equal(pulled, -0.5 * grad)


def test_pull_fills_arrays_given_in_out_and_refuses_wrong_ones(cluster2):
    client = cluster2.client()
    client.create_variables(
        [
            psrt.dense("o", (1000, 3), num_shards=2, optimizer="sgd", learning_rate=1.0),
            psrt.embedding("oe", 50, 4, num_shards=2, optimizer="sgd", learning_rate=1.0),
        ]
    )
    client.push({"o": np.ones((1000, 3), np.float32), "oe": ([7, 9], np.ones((2, 4), np.float32))})
    dense, rows = np.full((1000, 3), 5.0, np.float32), np.zeros(8, np.float32)  # flat is fine
    got = client.pull({"o": None, "oe": [9, 7]}, out={"o": dense, "oe": rows})
    assert got["o"] is dense and got["oe"] is rows
    assert np.array_equal(dense, np.full((1000, 3), -1.0)) and np.array_equal(rows, -np.ones(8))
    with pytest.raises(TypeError, match="'o': the output must be a C-contiguous writable float32"):
        client.pull({"o": None}, out={"o": np.zeros((1000, 3), np.float64)})
    with pytest.raises(TypeError, match="C-contiguous"):
        client.pull({"o": None}, out={"o": np.zeros((3, 1000), np.float32).T})
    with pytest.raises(ValueError, match="'oe': the output holds 12 floats, expected 8"):
        client.pull({"oe": [9, 7]}, out={"oe": np.zeros((3, 4), np.float32)})


def test_a_call_in_flight_outlives_close(cluster2):
    client = cluster2.client()
    client.create_variables([psrt.dense("cl", (1 << 20,), optimizer="sgd", learning_rate=1.0)])
    pending = client.start_push({"cl": np.ones(1 << 20, np.float32)})
    client.close()
    pending.result()  # the native client lives until its calls are done
    with pytest.raises(ValueError, match="the client is closed"):
        client.pull_dense("cl")
    assert np.array_equal(cluster2.client().pull_dense("cl"), -np.ones(1 << 20))


def test_sparse_push_sums_duplicates_and_matches_adagrad(cluster2):
    client = cluster2.client()
    client.create_variables(
        [
            psrt.embedding(
                "emb",
                10_000,
                8,
                num_shards=4,
                routing="mod",
                optimizer="adagrad",
                learning_rate=0.1,
            )
        ]
    )
    ids = np.array([5, 9_999, 5, 42, 5, 0], dtype=np.int64)
    grads = np.arange(ids.size * 8, dtype=np.float32).reshape(-1, 8) / 10
    client.push_rows("emb", ids, grads)
    # Reference: duplicates summed, then one Adagrad step from 0 with
    # accumulator 0.1.
    expected = {}
    for i, g in zip(ids, grads):
        expected[i] = expected.get(i, 0) + g
    got = client.pull_rows("emb", [5, 9_999, 42, 0, 7])
    for row, i in zip(got, [5, 9_999, 42, 0]):
        g = expected[i].astype(np.float32)
        acc = np.float32(0.1) + g * g
        np.testing.assert_allclose(row, -np.float32(0.1) * g / np.sqrt(acc), rtol=1e-6)
    assert np.count_nonzero(got[4]) == 0  # never pushed
    # Pulls return rows in the order asked, repeats included.
    again = client.pull_rows("emb", [0, 5, 0])
    assert np.array_equal(again[0], got[3]) and np.array_equal(again[1], got[0])


def test_updates_equal_the_cpp_clients(cluster2, cpp_push):
    """The same pushes through the Python and the C++ client give
    bit-identical parameters (Adam dense, FTRL and Adagrad embeddings)."""
    client = cluster2.client()
    specs = []
    for who in ("py", "cpp"):
        specs += [
            psrt.dense(
                f"{who}/adam",
                (300, 7),
                num_shards=3,
                optimizer="adam",
                learning_rate=0.01,
                initializer=("uniform", {"min": -1, "max": 1}),
            ),
            psrt.embedding(
                f"{who}/ftrl",
                5_000,
                4,
                num_shards=2,
                optimizer="ftrl",
                learning_rate=0.05,
                l1=0.01,
                l2=0.001,
            ),
            psrt.hash_embedding(f"{who}/hash", 8, num_shards=3, optimizer="adagrad"),
        ]
    client.create_variables(specs)
    rng = np.random.default_rng(3)
    for step in range(5):
        g_dense = rng.normal(size=(300, 7)).astype(np.float32)
        ids = rng.integers(0, 5_000, size=200)  # with repeats
        g_rows = rng.normal(size=(200, 4)).astype(np.float32)
        hash_ids = rng.integers(-(10**12), 10**12, size=100)
        g_hash = rng.normal(size=(100, 8)).astype(np.float32)
        client.push(
            {"py/adam": g_dense, "py/ftrl": (ids, g_rows), "py/hash": (hash_ids, g_hash)}, step=step
        )
        cpp_push(cluster2, "cpp/adam", g_dense)
        cpp_push(cluster2, "cpp/ftrl", g_rows, ids=ids)
        cpp_push(cluster2, "cpp/hash", g_hash, ids=hash_ids)
    versions = {
        (v.spec.name, sh.shard): sh.version
        for listing in client.list_variables()
        for v in listing.variables
        for sh in v.shards
    }
    py, cpp = client.pull_dense("py/adam"), client.pull_dense("cpp/adam")
    assert np.array_equal(py, cpp), (np.count_nonzero(py != cpp), versions)
    all_ids = np.arange(5_000)
    assert np.array_equal(
        client.pull_rows("py/ftrl", all_ids), client.pull_rows("cpp/ftrl", all_ids)
    )
    assert np.array_equal(
        client.pull_rows("py/hash", hash_ids), client.pull_rows("cpp/hash", hash_ids)
    )


def test_errors_are_exceptions_with_the_servers_message(cluster2):
    client = cluster2.client()
    client.create_variables(
        [
            psrt.embedding("e", 100, 4, num_shards=2),
            psrt.dense("d", (10,), num_shards=1),
            psrt.dense("m", (10, 3), num_shards=1),
        ]
    )
    # Only float32 gradients, never converted silently.
    with pytest.raises(TypeError, match="float32"):
        client.push_dense("d", np.arange(10))
    with pytest.raises(TypeError, match="float64"):
        client.push_dense("d", np.zeros(10))
    with pytest.raises(TypeError, match="float16"):
        client.push_rows("e", [1], np.zeros((1, 4), np.float16))
    # Shapes, not element counts.
    with pytest.raises(ValueError, match=r"shape \(11,\), expected"):
        client.push_dense("d", np.zeros(11, np.float32))
    with pytest.raises(ValueError, match=r"shape \(3, 10\), expected \(10, 3\)"):
        client.push_dense("m", np.zeros((3, 10), np.float32))
    with pytest.raises(ValueError, match=r"shape \(4, 2\), expected \(2, 4\)"):
        client.push_rows("e", [1, 2], np.zeros((4, 2), np.float32))
    client.push_dense("m", np.zeros((10, 3), np.float32))  # its own shape
    client.push_dense("m", np.zeros(30, np.float32))  # or flat, as pulled
    client.push_rows("e", np.array([[1, 2]]), np.zeros((1, 2, 4), np.float32))
    with pytest.raises(ValueError, match="learning_rate"):
        client.push_dense("d", np.zeros(10, np.float32), learning_rate=float("inf"))
    with pytest.raises(TypeError, match="integers"):
        client.pull_rows("e", np.array([1.5]))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 100\)"):
        client.pull_rows("e", [3, 100])
    with pytest.raises(psrt.PsError) as e:
        client.pull_dense("nope")
    assert e.value.code.name == "NOT_FOUND"
    bad = np.zeros(10, np.float32)
    bad[3] = np.nan
    with pytest.raises(ValueError, match="gradient element 3 is nan; nothing was sent"):
        client.push_dense("d", bad)
    assert np.count_nonzero(client.pull_dense("d")) == 0  # nothing applied
    # All or nothing across PS: rows on both PS and a bad dense part.
    ones = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match="'d'"):
        client.push({"e": (np.array([1, 99]), ones), "d": bad})
    assert np.count_nonzero(client.pull_rows("e", [1, 99])) == 0
    # Finite rows whose repeats sum to inf.
    with pytest.raises(ValueError, match=r"row of id 7 \(summed over its repeats\) is inf"):
        client.push_rows("e", [7, 7], np.full((2, 4), 3e38, np.float32))
    assert sum(s.push_requests for s in client.stats()) == 3  # only the good ones
    # A spec that differs from an existing one is refused by name.
    with pytest.raises(psrt.PsError) as e:
        client.create_variables([psrt.embedding("e", 100, 8, num_shards=2)])
    assert "already exists" in str(e.value)


def test_a_push_one_ps_refuses_names_where_it_was_applied(cluster2):
    client = cluster2.client()
    client.create_variables(
        [psrt.dense("d", (8,), num_shards=1), psrt.hash_embedding("h", 4, capacity=4, num_shards=2)]
    )
    dense_ps = client.layout("d").shards[0].ps_task
    other = 1 - dense_ps
    h = client.layout("h")
    ids = np.arange(1000, 1064)
    ids = ids[[h.shards[s].ps_task == other for s in h.shard_of(ids)]]
    with pytest.raises(psrt.PsError) as e:
        client.push({"d": np.ones(8, np.float32), "h": (ids, np.ones((ids.size, 4), np.float32))})
    assert e.value.code.name == "RESOURCE_EXHAUSTED"
    assert f"applied on PS {dense_ps} (" in str(e.value)
    assert f"; not applied on PS {other} (" in str(e.value)
    assert np.allclose(client.pull_dense("d"), -0.01)  # SGD, lr 0.01: applied


def test_a_restarted_ps_gets_the_catalog_again_and_restores(make_cluster, tmp_path):
    cluster = make_cluster(2, [f"--checkpoint_uri={tmp_path}"])
    specs = [psrt.dense("a", (6,), num_shards=2), psrt.embedding("b", 100, 4, num_shards=2)]
    client = cluster.client()
    client.create_variables(specs[:1])  # as two modules would, one by one
    client.create_variables(specs[1:])
    client.push_dense("a", np.arange(6, dtype=np.float32))
    client.push_rows("b", np.array([3, 97]), np.ones((2, 4), np.float32))
    before_a, before_b = client.pull_dense("a"), client.pull_rows("b", np.array([3, 97]))
    client.checkpoint()
    cluster.restart(1, ["--restore=auto"])  # empty until told its variables
    with pytest.raises(psrt.PsError) as e:
        client.pull_dense("a")
    assert e.value.code.name == "NOT_FOUND" and e.value.ps == 1
    # Only "b" again (nothing new): the whole catalog goes to every PS.
    client.create_variables(specs[1:])
    assert np.array_equal(client.pull_dense("a"), before_a)
    assert np.array_equal(client.pull_rows("b", np.array([3, 97])), before_b)


def test_create_is_idempotent_across_clients_and_checkpoint(make_cluster, tmp_path):
    cluster = make_cluster(2, [f"--checkpoint_uri={tmp_path}"])
    specs = [psrt.dense("a", (4,)), psrt.embedding("b", 10, 2)]
    first, second = cluster.client(), cluster.client()
    first.create_variables(specs)
    second.create_variables(specs)  # same specs again: fine
    second.push_dense("a", np.ones(4, np.float32))
    assert np.allclose(first.pull_dense("a"), -0.01)
    saved = first.checkpoint()
    assert saved.uri.startswith(str(tmp_path)) and saved.files == 2 and saved.bytes > 0
    stats = first.stats()
    assert len(stats) == 2 and stats[0].push_requests >= 1


def test_concurrent_creators_all_succeed_and_create_once(cluster2):
    # Workers start together and each creates the model's variables: a
    # creator that finds another's creation in progress on PS 0 looks again
    # and retries (nothing was created by its attempt), as the C++ client
    # does, instead of failing the worker.
    import threading

    clients = [cluster2.client() for _ in range(4)]
    errors = []
    for round_ in range(5):
        specs = [psrt.dense(f"r{round_}_d{i}", (1000,), num_shards=2) for i in range(3)] + [
            psrt.embedding(f"r{round_}_e", 5000, 8, num_shards=2)
        ]
        start = threading.Barrier(len(clients))

        def create(c):
            start.wait()
            try:
                c.create_variables(specs)
            except psrt.PsError as e:
                errors.append(str(e))

        threads = [threading.Thread(target=create, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    names = [v.spec.name for v in clients[0].list_variables()[0].variables]
    assert len(names) == 5 * 4 and len(set(names)) == 5 * 4
