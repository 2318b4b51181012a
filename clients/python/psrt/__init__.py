"""psrt: the Python client of the psrt parameter server (a binding of the
C++ client, clients/cpp/client.h).

    import psrt
    client = psrt.Client({"cluster": {"ps": ["localhost:2223"]}})
    client.create_variables([psrt.embedding("emb", vocab=100_000, dim=16,
                                            optimizer="adagrad", learning_rate=0.05)])
    rows = client.pull_rows("emb", ids)
    client.push_rows("emb", ids, grads)
"""
from ._proto import ps_pb2
from .client import Client, Pending, PsError, load_cluster
from .shard_map import ShardMap, mix_id, normalize
from .specs import dense, embedding, hash_embedding
from .worker_info import WorkerInfo, worker_info

__all__ = ["Client", "Pending", "PsError", "ShardMap", "WorkerInfo", "dense", "embedding"]
__all__ += ["hash_embedding", "load_cluster", "mix_id", "normalize", "ps_pb2", "worker_info"]
