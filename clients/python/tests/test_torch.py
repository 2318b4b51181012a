"""psrt.torch against real servers: the Embedding module's forward/backward
and DenseParameters give the same result as the equivalent local PyTorch
computation with the same optimizer."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import psrt  # noqa: E402
import psrt.torch  # noqa: E402


def test_embedding_backward_pushes_summed_row_gradients(cluster2):
    client = cluster2.client()
    emb = psrt.torch.Embedding(
        client, "emb", vocab=1000, dim=4, optimizer="sgd", learning_rate=1.0, initializer="zeros"
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
        client.pull_rows(f"bag_{mode}", touched), local.weight[touched].detach().numpy(), rtol=1e-6
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
