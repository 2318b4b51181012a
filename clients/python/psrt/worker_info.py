"""Which training worker this process is, from what its launcher set:
torchrun's RANK, WORLD_SIZE and LOCAL_RANK; else TF_CONFIG's task (as
SageMaker's TensorFlow toolkit, Kubeflow's TFJob and psrt's launchers write
it; a chief or master is rank 0 and workers follow it); else the only
worker. Use it to shard data and pick a device:

    info = psrt.worker_info()
    data = data[info.rank :: info.world_size]
    device = torch.device("cuda", info.local_rank)
"""
import json
import os
from typing import Mapping, NamedTuple, Optional


class WorkerInfo(NamedTuple):
    rank: int  # 0 .. world_size - 1
    world_size: int
    local_rank: int  # this worker's index on its host


def _int(environ, name, default=None):
    text = environ.get(name)
    if text is None or text == "":
        if default is None:
            raise ValueError(f"{name} is not set (torchrun sets RANK and WORLD_SIZE together)")
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def worker_info(environ: Optional[Mapping[str, str]] = None) -> WorkerInfo:
    """This process's WorkerInfo; ValueError naming the variable when the
    environment is inconsistent (RANK outside WORLD_SIZE, a TF_CONFIG task
    that is not a training worker)."""
    env = os.environ if environ is None else environ
    if "RANK" in env or "WORLD_SIZE" in env:
        rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
        local = _int(env, "LOCAL_RANK", 0)
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"RANK={rank} is not within WORLD_SIZE={world}")
        if local < 0:
            raise ValueError(f"LOCAL_RANK={local} is negative")
        return WorkerInfo(rank, world, local)
    if env.get("TF_CONFIG"):
        try:
            config = json.loads(env["TF_CONFIG"])
            cluster, task = config.get("cluster", {}), config.get("task", {})
            kind, index = task.get("type", "worker"), int(task.get("index", 0))
        except (ValueError, AttributeError, TypeError) as e:
            raise ValueError(f"TF_CONFIG is not a TensorFlow cluster config: {e}") from None
        chiefs = len(cluster.get("chief", [])) + len(cluster.get("master", []))
        workers = len(cluster.get("worker", []))
        if kind in ("chief", "master"):
            rank = index
        elif kind == "worker":
            rank = chiefs + index
        else:
            raise ValueError(f"TF_CONFIG's task is {kind!r}, not a training worker")
        world = chiefs + workers
        if not 0 <= rank < world:
            raise ValueError(
                f"TF_CONFIG's task {kind} {index} is not in its cluster "
                f"({chiefs} chief/master, {workers} workers)"
            )
        return WorkerInfo(rank, world, 0)
    return WorkerInfo(0, 1, 0)
