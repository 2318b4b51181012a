"""psrt.torch against real servers: the Embedding module's forward/backward
and DenseParameters give the same result as the equivalent local PyTorch
computation with the same optimizer."""
import grpc
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import psrt  # noqa: E402
import psrt.torch  # noqa: E402


def test_embedding_backward_pushes_summed_row_gradients(cluster2):
    client = cluster2.client()
    emb = psrt.torch.Embedding(
        client,
        "emb",
        vocab=1000,
        dim=4,
        optimizer="sgd",
        learning_rate=1.0,
        initializer="zeros",
    )
    ids = torch.tensor([[3, 7], [3, 999]])
    out = emb(ids)
    assert out.shape == (2, 2, 4)
    weights = torch.arange(16, dtype=torch.float32).reshape(2, 2, 4)
    (out * weights).sum().backward()
    emb.flush()
    rows = client.pull_rows("emb", [3, 7, 999, 0])
    # d/d row = sum of the weights where the id occurs; SGD lr 1 from zeros.
    np.testing.assert_array_equal(rows[0], -(weights[0, 0] + weights[1, 0]).numpy())
    np.testing.assert_array_equal(rows[1], -weights[0, 1].numpy())
    np.testing.assert_array_equal(rows[2], -weights[1, 1].numpy())
    np.testing.assert_array_equal(rows[3], np.zeros(4))


def test_dense_parameters_follow_local_sgd(cluster2):
    torch.manual_seed(0)
    client = cluster2.client()
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    dense = psrt.torch.DenseParameters(
        client, model, prefix="m/", optimizer="sgd", learning_rate=0.1
    )
    dense.pull()
    local = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    local.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(local.parameters(), lr=0.1)
    x, y = torch.randn(16, 5), torch.randn(16, 1)
    for _ in range(5):
        dense.pull()
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        dense.push()
        opt.zero_grad()
        torch.nn.functional.mse_loss(local(x), y).backward()
        opt.step()
    dense.pull()
    for (name, p), q in zip(model.named_parameters(), local.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_matches_torch_and_pushes_its_gradient(cluster2, mode):
    """Forward equals torch.nn.EmbeddingBag over the same table; one SGD
    step on the servers equals torch's on a local copy (per-sample weights
    in sum mode; 2-D bags and 1-D ids with offsets)."""
    client = cluster2.client()
    bag = psrt.torch.EmbeddingBag(
        client,
        f"bag_{mode}",
        vocab=50,
        dim=3,
        mode=mode,
        optimizer="sgd",
        learning_rate=0.5,
        initializer=("uniform", {"min": -1.0, "max": 1.0}),
    )
    table = torch.from_numpy(client.pull_rows(f"bag_{mode}", np.arange(50)))
    local = torch.nn.EmbeddingBag(50, 3, mode=mode)
    with torch.no_grad():
        local.weight.copy_(table)
    ids = torch.tensor([4, 9, 4, 17, 9, 9, 2])
    offsets = torch.tensor([0, 3, 5])  # bags [4, 9, 4], [17, 9], [9, 2]
    weights = torch.tensor([0.5, 2.0, 1.0, -1.0, 3.0, 1.5, 0.25]) if mode == "sum" else None
    out = bag(ids, offsets, per_sample_weights=weights)
    expected = local(ids, offsets, per_sample_weights=weights)
    torch.testing.assert_close(out, expected)

    target = torch.arange(9, dtype=torch.float32).reshape(3, 3)
    torch.nn.functional.mse_loss(out, target).backward()
    bag.flush()
    torch.nn.functional.mse_loss(expected, target).backward()
    with torch.no_grad():
        local.weight -= 0.5 * local.weight.grad
    touched = [2, 4, 9, 17]
    np.testing.assert_allclose(
        client.pull_rows(f"bag_{mode}", touched),
        local.weight[touched].detach().numpy(),
        rtol=1e-6,
    )
    untouched = [0, 1, 49]
    np.testing.assert_array_equal(
        client.pull_rows(f"bag_{mode}", untouched), table[untouched].numpy()
    )

    # 2-D ids are fixed-size bags.
    ids2 = torch.tensor([[1, 3], [3, 3]])
    torch.testing.assert_close(bag(ids2), local(ids2), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="need offsets"):
        bag(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="mode must be"):
        psrt.torch.EmbeddingBag(client, "bad", vocab=5, dim=2, mode="median")


def test_sync_training_through_steps_equals_the_same_loop_run_locally(make_cluster):
    """Two workers in sync mode (one process, their steps interleaved as two
    hosts' would be), an embedding feeding an MLP, SGD on the servers,
    psrt.torch.Steps making one push per step. The reference is the same
    loop in plain PyTorch on one copy of the model: each step applies the
    mean of the two workers' gradients, as the servers do. After 6 steps the
    table and every dense weight equal the reference bit for bit (SGD's
    update is one multiply-add per element: nothing for rounding to reorder
    but the two-worker sum, done in the same order)."""
    workers, lr, steps_run = 2, 0.5, 6
    cluster2 = make_cluster(2, workers=workers)
    init = ("uniform", {"min": -0.5, "max": 0.5})

    def make_mlp():
        return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))

    replicas = []
    for rank in range(workers):
        client = cluster2.client(
            mode="sync", worker=psrt.WorkerInfo(rank, workers, 0), sync_timeout=30
        )
        emb = psrt.torch.Embedding(
            client, "sync_emb", vocab=40, dim=4, optimizer="sgd",
            learning_rate=lr, initializer=init, seed=3,
        )  # fmt: skip
        torch.manual_seed(7)  # every worker builds the same module
        mlp = make_mlp()
        dense = psrt.torch.DenseParameters(
            client, mlp, prefix="sync_mlp/", optimizer="sgd", learning_rate=lr
        )
        replicas.append((emb, mlp, dense, psrt.torch.Steps(client, [emb, dense])))
    # The reference starts from the servers' initial values.
    observer = cluster2.client()
    table = torch.from_numpy(observer.pull_rows("sync_emb", np.arange(40))).clone()
    initial_rows = table.numpy().copy()
    reference = make_mlp()
    start = observer.pull({f"sync_mlp/{n}": None for n, _ in reference.named_parameters()})
    with torch.no_grad():
        for n, p in reference.named_parameters():
            p.copy_(torch.from_numpy(start[f"sync_mlp/{n}"]).reshape(p.shape))
    batches = [
        [(torch.randint(0, 40, (16, 2)), torch.randint(0, 2, (16, 1)).float()) for _ in range(2)]
        for _ in range(steps_run)
    ]

    def loss_of(mlp, rows, labels):
        logits = mlp(rows.reshape(rows.shape[0], -1))
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)

    for step in range(steps_run):
        for rank, (emb, mlp, dense, steps) in enumerate(replicas):
            ids, labels = batches[step][rank]
            steps.pull(step)
            mlp.zero_grad()
            loss_of(mlp, emb(ids), labels).backward()
            steps.push()
        # The reference: each worker's gradient as psrt.torch computes it
        # (rows of the unique ids, repeats summed), then their mean.
        table_grad = torch.zeros_like(table)
        dense_grads = [torch.zeros_like(p) for p in reference.parameters()]
        for rank in range(workers):
            ids, labels = batches[step][rank]
            unique, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
            rows = table[unique].clone().requires_grad_(True)
            reference.zero_grad()
            loss_of(reference, rows[inverse].reshape(*ids.shape, 4), labels).backward()
            table_grad.index_add_(0, unique, rows.grad)
            for g, p in zip(dense_grads, reference.parameters()):
                g += p.grad
        with torch.no_grad():
            table -= lr * (table_grad * (1.0 / workers))
            for g, p in zip(dense_grads, reference.parameters()):
                p -= lr * (g * (1.0 / workers))
    for _, _, _, steps in replicas:
        steps.flush()
    served = observer.pull_rows("sync_emb", np.arange(40))
    np.testing.assert_array_equal(served, table.numpy())
    values = observer.pull({f"sync_mlp/{n}": None for n, _ in reference.named_parameters()})
    for n, p in reference.named_parameters():
        np.testing.assert_array_equal(
            values[f"sync_mlp/{n}"].reshape(p.shape), p.detach().numpy(), err_msg=n
        )
    # Every row the batches touched moved (the bound can fail).
    touched = torch.unique(torch.cat([b[0].reshape(-1) for s in batches for b in s]))
    moved = np.abs(served - initial_rows).sum(axis=1) > 0
    assert moved[touched.numpy()].all() and not np.delete(moved, touched.numpy()).any()


def test_ssp_pull_waits_for_the_slowest_worker_and_names_it(make_cluster):
    """SSP through Steps: with staleness 1, worker 0 may run one step ahead
    of worker 1 but not two: its pull of step 2 waits for worker 1's push of
    step 0, and fails after sync_timeout naming worker 1; once worker 1 has
    pushed, it goes on."""
    cluster = make_cluster(1, workers=2)
    steps = []
    for rank in range(2):
        client = cluster.client(
            mode="ssp",
            staleness=1,
            sync_timeout=1.0,
            worker=psrt.WorkerInfo(rank, 2, 0),
        )
        emb = psrt.torch.Embedding(client, "ssp_emb", vocab=10, dim=2, optimizer="sgd")
        steps.append((emb, psrt.torch.Steps(client, [emb])))
    ids = torch.tensor([1, 2])

    def run_step(worker, step):
        emb, s = steps[worker]
        s.pull(step)
        emb(ids).sum().backward()
        s.push()
        s.flush()

    run_step(0, 0)
    run_step(0, 1)
    with pytest.raises(psrt.PsError) as waited:
        run_step(0, 2)
    assert waited.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "worker 1" in str(waited.value), waited.value
    run_step(1, 0)
    run_step(0, 2)  # now within the staleness bound


def test_client_refuses_an_unknown_mode(cluster2):
    with pytest.raises(ValueError, match="mode must be one of"):
        cluster2.client(mode="bsp")
    with pytest.raises(ValueError, match="staleness"):
        cluster2.client(mode="ssp", staleness=-1)
