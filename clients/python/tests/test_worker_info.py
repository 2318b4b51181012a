"""psrt.worker_info reads the launcher's environment: torchrun's variables,
else TF_CONFIG (SageMaker's and TFJob's shapes), else a single worker; an
inconsistent environment is a ValueError naming the variable."""
import json

import pytest

import psrt


def test_torchrun_variables():
    info = psrt.worker_info({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"})
    assert info == psrt.WorkerInfo(rank=3, world_size=8, local_rank=1)
    assert psrt.worker_info({"RANK": "0", "WORLD_SIZE": "1"}).local_rank == 0
    # torchrun's variables win over a TF_CONFIG left in the environment.
    tf = json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})
    assert psrt.worker_info({"RANK": "2", "WORLD_SIZE": "4", "TF_CONFIG": tf}).rank == 2


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RANK": "4", "WORLD_SIZE": "4"}, "RANK=4 is not within WORLD_SIZE=4"),
        ({"RANK": "-1", "WORLD_SIZE": "4"}, "RANK=-1"),
        ({"RANK": "1"}, "WORLD_SIZE is not set"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-2"}, "LOCAL_RANK=-2"),
    ],
)
def test_bad_torchrun_variables_are_named(env, message):
    with pytest.raises(ValueError, match=message):
        psrt.worker_info(env)


def test_tf_config_master_chief_and_workers():
    # SageMaker's TensorFlow toolkit: a master, workers and ps.
    cluster = {"master": ["algo-1:2222"], "worker": ["algo-2:2222", "algo-3:2222"], "ps": ["x:1"]}

    def info(kind, index):
        tf = {"cluster": cluster, "environment": "cloud", "task": {"type": kind, "index": index}}
        return psrt.worker_info({"TF_CONFIG": json.dumps(tf)})

    assert info("master", 0) == (0, 3, 0)
    assert info("worker", 0) == (1, 3, 0)
    assert info("worker", 1) == (2, 3, 0)
    with pytest.raises(ValueError, match="not in its cluster"):
        info("worker", 2)
    with pytest.raises(ValueError, match="'ps', not a training worker"):
        info("ps", 0)
    with pytest.raises(ValueError, match="'evaluator', not a training worker"):
        info("evaluator", 0)
    # Workers only (TFJob without a chief).
    tf = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    assert psrt.worker_info({"TF_CONFIG": json.dumps(tf)}) == (1, 2, 0)
    with pytest.raises(ValueError, match="TF_CONFIG is not"):
        psrt.worker_info({"TF_CONFIG": "{not json"})


def test_nothing_set_is_one_worker():
    assert psrt.worker_info({}) == (0, 1, 0)
