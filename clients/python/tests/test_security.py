"""The Python client over TLS with the shared token, against servers started
with certificates made by the openssl CLI."""
import subprocess

import numpy as np
import pytest

import psrt


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    script = f"""set -e; cd {d}
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=ca
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \\
  -out server.pem -days 2 -extfile san.ext
echo py-token > token
"""
    subprocess.run(["bash", "-c", script], check=True, capture_output=True)
    return d


def test_tls_and_token(make_cluster, certs):
    flags = [
        f"--tls_cert_file={certs}/server.pem",
        f"--tls_key_file={certs}/server.key",
        f"--auth_token_file={certs}/token",
    ]
    good = {"tls_ca_file": str(certs / "ca.pem"), "auth_token": "py-token"}
    cluster = make_cluster(1, flags, client_kwargs=good)
    client = cluster.client()
    client.create_variables([psrt.dense("w", (8,), learning_rate=1.0)])
    client.push_dense("w", np.ones(8, np.float32))
    assert np.array_equal(client.pull_dense("w"), -np.ones(8, np.float32))

    no_token = cluster.client(auth_token="")
    with pytest.raises(psrt.PsError) as e:
        no_token.pull_dense("w")
    assert e.value.code.name == "UNAUTHENTICATED"
    assert "auth token" in e.value.server_message

    plaintext = psrt.Client(cluster.spec, auth_token="py-token", timeout=3, max_attempts=1)
    with pytest.raises(psrt.PsError) as e:
        plaintext.pull_dense("w")
    assert e.value.code.name in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
