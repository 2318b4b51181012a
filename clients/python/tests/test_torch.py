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
