"""Servers with --replicas=2: the Python client follows a failover. PS 1
is killed with SIGKILL; the next push waits while its backup (PS 2)
takes its shards over, is sent there, and is applied once; pulls of PS
1's shards then read PS 2's copy, which holds every push acknowledged
before the kill. Restarted, PS 1 rejoins and takes its shards back
(handback): the client's next push is refused by PS 2, learns the new
routing and lands on PS 1, applied once."""
import time

import numpy as np
import pytest

import psrt


def _model():
    return [
        psrt.dense("w", (3000, 4), num_shards=3, optimizer="sgd", learning_rate=0.5),
        psrt.embedding(
            "emb",
            9000,
            8,
            num_shards=3,
            routing="mod",
            optimizer="sgd",
            learning_rate=0.5,
        ),
    ]


def test_pushes_and_pulls_follow_a_failover_and_apply_once(make_cluster):
    cluster = make_cluster(3, flags=["--replicas=2"], distinct_hosts=True)
    client = cluster.client()
    client.create_variables(_model())
    rng = np.random.default_rng(3)
    ids = np.arange(0, 9000, 7, dtype=np.int64)  # rows on every shard
    dense = [rng.integers(-8, 8, size=(3000, 4)).astype(np.float32) for _ in range(2)]
    rows = [rng.integers(-8, 8, size=(ids.size, 8)).astype(np.float32) for _ in range(2)]
    client.push({"w": dense[0], "emb": (ids, rows[0])})
    cluster.kill(1)
    killed = time.monotonic()
    # Its first tries fail (PS 1 is gone; PS 2 has not taken over yet);
    # it keeps trying for failover_wait, then goes to PS 2.
    client.push({"w": dense[1], "emb": (ids, rows[1])})
    took = time.monotonic() - killed
    print(f"push acknowledged {took:.2f} s after the kill")
    # SGD with small integers: exact in float32. Each push applied once
    # (the retried one too), every shard's values there.
    assert np.array_equal(client.pull_dense("w"), -0.5 * (dense[0] + dense[1]))
    assert np.array_equal(client.pull_rows("emb", ids), -0.5 * (rows[0] + rows[1]))
    assert took < 20
    # A new client learns the routing on its first failure as well.
    fresh = cluster.client()
    assert np.array_equal(fresh.pull_dense("w"), -0.5 * (dense[0] + dense[1]))
    fresh.close()
    client.close()


def _term(client, ps, of):
    """PS `of`'s membership term as PS `ps` reports it."""
    return client.stats()[ps].ps_terms.get(of, 0)


def test_a_restarted_ps_takes_its_shards_back_and_the_client_follows(make_cluster):
    cluster = make_cluster(3, flags=["--replicas=2"], distinct_hosts=True)
    client = cluster.client()
    client.create_variables(_model())
    rng = np.random.default_rng(5)
    ids = np.arange(0, 9000, 7, dtype=np.int64)
    dense = [rng.integers(-8, 8, size=(3000, 4)).astype(np.float32) for _ in range(3)]
    rows = [rng.integers(-8, 8, size=(ids.size, 8)).astype(np.float32) for _ in range(3)]
    client.push({"w": dense[0], "emb": (ids, rows[0])})
    cluster.kill(1)
    client.push({"w": dense[1], "emb": (ids, rows[1])})  # lands on PS 2
    assert client.serving(1) == 2
    cluster.restart(1)
    restarted = time.monotonic()
    observer = cluster.client()
    # PS 1 and PS 2 know at once; PS 0 within a lease renewal (gossip).
    terms = []
    while time.monotonic() - restarted < 60 and terms != [2, 2, 2]:
        time.sleep(0.1)
        terms = [_term(observer, ps, 1) for ps in range(3)]
    print(
        f"every PS knows PS 1 serves again {time.monotonic() - restarted:.2f} s after its restart"
    )
    assert terms == [2, 2, 2], cluster.log_tails()
    assert all(not s.failed_ps for s in observer.stats())
    observer.close()
    # Still routed to PS 2: refused there, sent to PS 1, applied once.
    client.push({"w": dense[2], "emb": (ids, rows[2])})
    assert client.serving(1) == 1
    assert np.array_equal(client.pull_dense("w"), -0.5 * (dense[0] + dense[1] + dense[2]))
    assert np.array_equal(client.pull_rows("emb", ids), -0.5 * (rows[0] + rows[1] + rows[2]))
    client.close()


def test_without_failover_wait_a_dead_ps_is_an_error_naming_it(make_cluster):
    cluster = make_cluster(3, flags=["--replicas=2"], distinct_hosts=True)
    client = cluster.client(failover_wait=0.0, max_attempts=1)
    client.create_variables(_model())
    cluster.kill(1)
    with pytest.raises(psrt.PsError) as e:
        client.pull_dense("w")
    assert e.value.ps == 1
    assert cluster.addresses[1] in str(e.value)
    client.close()


def test_two_ps_fail_over_with_the_workers_as_witnesses(make_cluster):
    """2 PS with --replicas=2 and 2 workers in the spec: the workers vote
    beside the PS (4 voters). A client that names no worker is no witness:
    alone it leaves the PS without a majority, and they refuse it. With
    the two workers' clients (their ranks given, as TF_CONFIG gives them)
    the PS serve; PS 1 killed with SIGKILL, PS 0 takes its shards over and
    every push lands once."""
    cluster = make_cluster(2, flags=["--replicas=2"], distinct_hosts=True, workers=2)
    lone = cluster.client(max_attempts=1, failover_wait=0.5)
    lone.create_variables(_model())
    deadline = time.monotonic() + 10
    while True:  # (first: the PS's streams to their backups start)
        with pytest.raises(psrt.PsError) as refused:
            lone.pull_dense("w")
        if "holds no lease" in str(refused.value) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "holds no lease" in str(refused.value), str(refused.value)
    assert "of 4 voters (PS and workers)" in str(refused.value), str(refused.value)
    assert "the workers vote" in str(refused.value), str(refused.value)
    lone.close()
    workers = [cluster.client(worker=psrt.WorkerInfo(r, 2, 0)) for r in range(2)]
    rng = np.random.default_rng(5)
    ids = np.arange(0, 9000, 7, dtype=np.int64)
    dense = [rng.integers(-8, 8, size=(3000, 4)).astype(np.float32) for _ in range(2)]
    rows = [rng.integers(-8, 8, size=(ids.size, 8)).astype(np.float32) for _ in range(2)]
    workers[0].push({"w": dense[0], "emb": (ids, rows[0])})
    cluster.kill(1)
    killed = time.monotonic()
    workers[1].push({"w": dense[1], "emb": (ids, rows[1])})
    took = time.monotonic() - killed
    print(f"2 PS: push acknowledged {took:.2f} s after the kill")
    assert np.array_equal(workers[0].pull_dense("w"), -0.5 * (dense[0] + dense[1]))
    assert np.array_equal(workers[0].pull_rows("emb", ids), -0.5 * (rows[0] + rows[1]))
    assert took < 20, cluster.log_tails()
    for w in workers:
        w.close()
