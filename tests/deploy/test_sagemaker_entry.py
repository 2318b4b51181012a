"""deploy/sagemaker/entry.py's plan(): the flags each host's ps_server and
ps_worker get from SageMaker's /opt/ml tree, without starting them (the
network-namespace tests run the whole entry point)."""
import importlib.util
import json
import os

import pytest

ENTRY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "sagemaker", "entry.py")


@pytest.fixture
def entry():
    spec = importlib.util.spec_from_file_location("psrt_sagemaker_entry", ENTRY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def opt_ml(tmp_path, monkeypatch, hyperparameters, channels=None):
    root = tmp_path / "opt_ml"
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (root / "input" / "data" / "train").mkdir(parents=True)
    (config / "resourceconfig.json").write_text(
        json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]})
    )
    # As the SageMaker SDK writes them: every value JSON-encoded.
    (config / "hyperparameters.json").write_text(
        json.dumps({k: json.dumps(v) for k, v in hyperparameters.items()})
    )
    if channels is not None:
        (config / "inputdataconfig.json").write_text(json.dumps(channels))
    for name in ("SM_HOSTS", "SM_CURRENT_HOST", "SM_CHANNEL_TRAIN", "SM_CHANNEL_EVAL"):
        monkeypatch.delenv(name, raising=False)
    return str(root)


def test_framework_hyperparameters_are_not_passed_as_flags(entry, tmp_path, monkeypatch, capsys):
    # What sagemaker.tensorflow.TensorFlow(...).fit() adds, next to the
    # user's own hyperparameters.
    root = opt_ml(
        tmp_path,
        monkeypatch,
        {
            "sagemaker_program": "train.py",
            "sagemaker_submit_directory": "s3://bucket/job/source/sourcedir.tar.gz",
            "sagemaker_container_log_level": 20,
            "sagemaker_job_name": "job",
            "sagemaker_region": "us-east-1",
            "model_dir": "s3://bucket/job/model",
            "model": "deepfm",
            "epochs": 2,
            "ps_apply_threads": 2,
            "restarts": 1,
        },
    )
    ps_flags, worker_flags, checkpoint_uri = entry.plan(entry.Config(root))
    flags = ps_flags + worker_flags
    assert not [f for f in flags if "sagemaker_" in f or f.startswith("--model_dir")], flags
    assert "--model=deepfm" in worker_flags and "--epochs=2" in worker_flags
    assert "--apply_threads=2" in ps_flags
    assert not [f for f in flags if f.startswith("--restarts")]  # the entry point's own
    assert checkpoint_uri == os.path.join(root, "checkpoints")
    logged = capsys.readouterr().out
    assert "ignoring the estimator's own hyperparameters" in logged
    assert "model_dir, sagemaker_container_log_level" in logged


def test_without_a_training_channel_it_stops_naming_it(entry, tmp_path, monkeypatch):
    root = opt_ml(tmp_path, monkeypatch, {"model": "lr"})
    os.rmdir(os.path.join(root, "input", "data", "train"))
    with pytest.raises(SystemExit, match="no training channel"):
        entry.plan(entry.Config(root))


def channel(distribution, mode="File"):
    # One channel of inputdataconfig.json as SageMaker writes it.
    return {
        "TrainingInputMode": mode,
        "S3DistributionType": distribution,
        "RecordWrapperType": "None",
    }


def test_sharded_by_s3_key_channels_are_not_split_again(entry, tmp_path, monkeypatch, capsys):
    sharded = opt_ml(
        tmp_path / "a", monkeypatch, {"model": "lr"}, {"train": channel("ShardedByS3Key")}
    )
    _, worker_flags, _ = entry.plan(entry.Config(sharded))
    assert "--data_sharding=none" in worker_flags
    assert "ShardedByS3Key" in capsys.readouterr().out
    # Pipe mode: each host's FIFO streams only its own objects too.
    piped = opt_ml(
        tmp_path / "b", monkeypatch, {"model": "lr"}, {"train": channel("ShardedByS3Key", "Pipe")}
    )
    _, worker_flags, _ = entry.plan(entry.Config(piped))
    assert "--data_sharding=none" in worker_flags
    # Fully replicated: the workers split it (ps_worker's default).
    replicated = opt_ml(
        tmp_path / "c", monkeypatch, {"model": "lr"}, {"train": channel("FullyReplicated")}
    )
    _, worker_flags, _ = entry.plan(entry.Config(replicated))
    assert not [f for f in worker_flags if f.startswith("--data_sharding")]
    # The user's own choice wins.
    chosen = opt_ml(
        tmp_path / "d",
        monkeypatch,
        {"model": "lr", "data_sharding": "record"},
        {"train": channel("ShardedByS3Key")},
    )
    _, worker_flags, _ = entry.plan(entry.Config(chosen))
    assert [f for f in worker_flags if f.startswith("--data_sharding")] == [
        "--data_sharding=record"
    ]


def test_ports_are_laid_out_as_sagemakers_tensorflow_toolkit_does(entry, tmp_path, monkeypatch):
    # sagemaker-tensorflow-training: ps on 2223, master/worker on 2222.
    root = opt_ml(tmp_path, monkeypatch, {"model": "lr"})
    spec = json.loads(entry.Config(root).tf_config("ps"))
    assert spec["cluster"]["ps"] == ["algo-1:2223", "algo-2:2223"]
    assert spec["cluster"]["worker"] == ["algo-1:2222", "algo-2:2222"]
    assert spec["task"] == {"type": "ps", "index": 0}
