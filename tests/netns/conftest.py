"""The training data every namespace test uses (generated once)."""
import os
import subprocess

import pytest

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
