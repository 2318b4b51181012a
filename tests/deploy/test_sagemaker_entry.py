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


def opt_ml(tmp_path, monkeypatch, hyperparameters):
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
