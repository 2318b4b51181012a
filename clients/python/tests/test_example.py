"""examples/python/adult_wide_deep.py: Wide & Deep on UCI Adult trained by 2
worker processes through a 2-PS psrt cluster reaches the test accuracy of
the same script trained locally (within 0.5%): started by hand (async),
and as Python workers under deploy/local/launch.py (sync)."""
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("torch")

SCRIPT = "examples/python/adult_wide_deep.py"


def accuracy(output):
    match = re.search(r"test_accuracy=([0-9.]+)", output)
    assert match, output
    return float(match.group(1))


def run(*args):
    out = subprocess.run(
        [sys.executable, SCRIPT, "--data=testdata/adult", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def local():
    """The held-out accuracy of the example trained locally: its runs are
    seeded, so one run serves the three comparisons."""
    return accuracy(run("--local"))


def launch_example(launcher_flags, script_flags):
    """The example as the worker command of deploy/local/launch.py with 2
    hosts; its stdout (every worker's lines, prefixed "[workerN]")."""
    out = subprocess.run(
        [
            sys.executable,
            "deploy/local/launch.py",
            "--hosts=2",
            "--bin_dir=.",
            f"--logs={tempfile.mkdtemp(prefix='psrt_launch_')}",
            *launcher_flags,
            "--",
            sys.executable,
            SCRIPT,
            "--data=testdata/adult",
            *script_flags,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    return out.stdout


def test_two_workers_through_psrt_match_local_training(make_cluster, local):
    cluster = make_cluster(2)
    spec = json.dumps(cluster.spec)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                SCRIPT,
                "--data=testdata/adult",
                f"--cluster={spec}",
                f"--worker_index={i}",
                "--num_workers=2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    for w in workers:
        out, _ = w.communicate(timeout=600)
        assert w.returncode == 0, out
    distributed = accuracy(run(f"--cluster={spec}", "--evaluate_only"))
    print(f"local {local:.5f}, psrt 2 workers {distributed:.5f}")
    assert local > 0.84
    assert abs(distributed - local) <= 0.005, (local, distributed)


def test_python_workers_under_the_launcher_train_in_sync_mode(local):
    """deploy/local/launch.py --hosts=2 with the example as its worker
    command: cluster and worker index come from the launcher's TF_CONFIG;
    in sync mode both workers end on the same parameters, so both print the
    same held-out accuracy."""
    out = launch_example([], ["--mode=sync"])
    found = re.findall(r"\[worker(\d)\] test_accuracy=([0-9.]+)", out)
    assert sorted(w for w, _ in found) == ["0", "1"], out[-4000:]
    first, second = (float(a) for _, a in found)
    print(f"local {local:.5f}, psrt sync 2 workers {first:.5f}")
    assert first == second
    assert abs(first - local) <= 0.005, (local, first)


def test_pytorch_ddp_dense_layers_with_psrt_embeddings(local):
    """--ddp: the MLP by torch DistributedDataParallel over Gloo (the group
    met at TF_CONFIG's worker 0), the embeddings on psrt in sync mode, two
    workers under deploy/local/launch.py -- on hosts in network namespaces
    where this runs as root (CI), else on loopback addresses. Both workers
    end with the same MLP bits, and the held-out accuracy is the local
    run's within 0.5%."""
    hosts = ["--netns=psrtpy", "--netns_subnet=10.99.0"] if os.geteuid() == 0 else []
    out = launch_example([*hosts, "--base_port=25900"], ["--mode=sync", "--ddp"])
    found = dict(re.findall(r"\[worker(\d)\] test_accuracy=([0-9.]+)", out))
    crcs = dict(re.findall(r"\[worker(\d)\] dense_crc32=([0-9a-f]{8})", out))
    assert sorted(found) == ["0", "1"] and sorted(crcs) == ["0", "1"], out[-4000:]
    print(f"local {local:.5f}, DDP + psrt 2 workers {found}, MLP crc32 {crcs}")
    assert crcs["0"] == crcs["1"]
    assert found["0"] == found["1"]
    assert abs(float(found["0"]) - local) <= 0.005, (local, found)
