"""Which data plane the Python client's pushes and pulls take: shared
memory to a PS on this host when both name shm, tcp by default; a
provider list that names none refused before anything is sent."""
import numpy as np
import pytest

import psrt


def _round_trip(client, name):
    """A dense push and pull of 4 MiB (bodies apart from their headers)."""
    client.create_variables(
        [psrt.dense(name, (1 << 18, 4), num_shards=2, optimizer="sgd", learning_rate=0.5)]
    )
    grad = np.random.default_rng(7).integers(-8, 8, size=(1 << 18, 4)).astype(np.float32)
    client.push_dense(name, grad)
    assert np.array_equal(client.pull_dense(name), -0.5 * grad)


def test_shared_memory_when_the_client_and_the_ps_name_it(make_cluster, capfd):
    cluster = make_cluster(1, flags=["--data_plane_providers=shm,tcp"])
    with cluster.client(data_plane_providers="shm,tcp") as client:
        _round_trip(client, "over_shm")
    with cluster.client(data_plane_providers=["tcp"]) as client:
        _round_trip(client, "over_tcp")
    # The C++ client says which provider each PS's calls took.
    err = capfd.readouterr().err
    assert err.count("over the data plane (shm)") == 1, err[-3000:]
    assert err.count("over the data plane (tcp)") == 1, err[-3000:]


@pytest.mark.parametrize("providers", ["", ",", [], ["shm", ""], "shm,,tcp", 5, [b"tcp"]])
def test_a_provider_list_naming_none_is_a_value_error(cluster2, providers):
    with pytest.raises(ValueError, match="data_plane_providers"):
        cluster2.client(data_plane_providers=providers)
