"""The training data every namespace test uses (generated once), and the
launchers a test left running stopped after it."""
import os
import subprocess

import pytest

import netns_util
from netns_util import ROOT


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("ctr")
    subprocess.run(
        [
            os.path.join(ROOT, "tools/ctr_datagen/ctr_datagen"),
            f"--output_dir={out}",
            "--train_examples=60000",
            "--test_examples=5000",
            "--format=tfrecord",
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(autouse=True)
def stop_leftover_launchers():
    """A test that fails (or times out) before its launcher exits would
    leave that cluster running into the next test: stop it."""
    yield
    while netns_util.LAUNCHED:
        netns_util.stop(netns_util.LAUNCHED.pop())
