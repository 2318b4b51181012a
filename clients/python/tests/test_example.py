"""examples/python/adult_wide_deep.py: Wide & Deep on UCI Adult trained by 2
worker processes through a 2-PS psrt cluster reaches the test accuracy of
the same script trained locally (within 0.5%)."""
import json
import re
import subprocess
import sys

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


def test_two_workers_through_psrt_match_local_training(make_cluster):
    local = accuracy(run("--local"))
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
