"""psrt's container images, made by deploy/image/make_image.sh from Debian's
archive and the package lists in deploy/image, then run as a container runs
them: the image's root file system as /, in its own mount, PID, UTS and
network namespaces (unshare + chroot), with an /etc/hosts mounted in as a
runtime does. What this proves that no other test does: the images hold
every library the binaries load, and the SageMaker image trains from
/opt/ml as a bring-your-own container.

Needs root and Debian's archive (mmdebstrap); it fails, not skips, without
them: an image nobody starts is how the missing libraries went unseen.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

ROOT = (
    os.path.join(os.environ["TEST_SRCDIR"], "psrt")
    if os.environ.get("TEST_SRCDIR")
    else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
# The binaries: the test's runfiles under Bazel, else bazel-bin.
BIN_DIR = ROOT if os.environ.get("TEST_SRCDIR") else os.path.join(ROOT, "bazel-bin")
MAKE_IMAGE = os.path.join(ROOT, "deploy/image/make_image.sh")
BINARIES = ("ps_server", "ps_worker", "psctl")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DONE = re.compile(r"done: steps=(\d+) examples=(\d+) .* lost_pushes=(\d+)")
AUC = re.compile(r"final eval_auc=([\d.]+)")


def run(argv, timeout=600, **kwargs):
    return subprocess.run(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PATH=PATH),
        **kwargs,
    )


def make_image(tmp_path_factory, name, *flags):
    if os.geteuid() != 0:
        pytest.fail("the image test needs root (mmdebstrap, unshare, chroot)")
    where = tmp_path_factory.mktemp(name)
    archive, rootfs = str(where / f"{name}.oci.tar"), str(where / "rootfs")
    made = run(
        [MAKE_IMAGE, f"--bin_dir={BIN_DIR}", f"--out={archive}", f"--rootfs={rootfs}", *flags]
    )
    print(made.stdout)
    assert made.returncode == 0, made.stdout[-4000:]
    yield archive, rootfs
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    yield from make_image(tmp_path_factory, "psrt")


@pytest.fixture(scope="module")
def sagemaker_image(tmp_path_factory, image):
    # As a user pushing both images builds it: a layer on the psrt image.
    yield from make_image(tmp_path_factory, "psrt-sagemaker", "--sagemaker", f"--base={image[0]}")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("ctr")
    subprocess.run(
        [
            os.path.join(BIN_DIR, "tools/ctr_datagen/ctr_datagen"),
            f"--output_dir={out}",
            "--train_examples=20000",
            "--test_examples=2000",
            "--format=tfrecord",
        ],
        check=True,
        capture_output=True,
    )
    return str(out)


def in_container(rootfs, script, hosts="127.0.0.1 localhost", hostname="psrt", timeout=300):
    """`script` (sh) run as PID 1's child in the image: its own mount, PID,
    UTS and network namespaces (loopback only), / = the image, /proc its
    own, /etc/hosts and the hostname as a runtime sets them."""
    hosts_file = os.path.join(os.path.dirname(rootfs), "hosts")
    with open(hosts_file, "w") as f:
        f.write(hosts + "\n")
    setup = (
        "set -e; ip link set lo up; "
        f"hostname {hostname}; "
        f"mount -t proc proc '{rootfs}/proc'; "
        f"mount --bind '{hosts_file}' '{rootfs}/etc/hosts'; "
        f"exec chroot '{rootfs}' /usr/bin/env -i PATH={PATH} HOME=/root /bin/sh -c \"$0\""
    )
    return run(
        ["unshare", "--mount", "--net", "--pid", "--uts", "--fork", "sh", "-c", setup, script],
        timeout=timeout,
    )


def test_the_archive_is_an_oci_image_skopeo_and_docker_load_take(image, tmp_path):
    archive, _ = image
    inspected = run(["skopeo", "inspect", "--config", f"oci-archive:{archive}"])
    assert inspected.returncode == 0, inspected.stdout
    config = json.loads(inspected.stdout)
    assert config["architecture"] == "amd64" and config["os"] == "linux"
    assert config["config"]["Entrypoint"] == ["ps_server"]
    assert set(config["config"]["ExposedPorts"]) == {"2223/tcp", "3223/tcp"}
    # What `docker load` reads; `podman load` reads the OCI archive itself.
    docker_archive = str(tmp_path / "psrt.docker.tar")
    copied = run(
        ["skopeo", "copy", f"oci-archive:{archive}", f"docker-archive:{docker_archive}:psrt:latest"]
    )
    assert copied.returncode == 0, copied.stdout
    assert os.path.getsize(docker_archive) > 20 << 20


def test_every_binary_finds_every_library_in_the_image(image):
    _, rootfs = image
    for binary in BINARIES:
        linked = run(["chroot", rootfs, "/usr/bin/ldd", f"/usr/local/bin/{binary}"])
        assert linked.returncode == 0, linked.stdout
        missing = [line.strip() for line in linked.stdout.splitlines() if "not found" in line]
        assert not missing, (
            f"{binary} in the image lacks {missing}: add its Debian package to "
            "deploy/image/runtime-packages.txt"
        )
        assert run(["chroot", rootfs, f"/usr/local/bin/{binary}", "--help"]).returncode in (0, 1)
    # The data plane loads libfabric on first use (dataplane/libfabric.h):
    # ldd does not list it, so its package is checked by name.
    assert os.path.exists(
        os.path.join(rootfs, "usr/lib/x86_64-linux-gnu/libfabric.so.1")
    ), "the image lacks libfabric1: --data_plane=fabric would fall back to gRPC"


def test_ps_server_and_ps_worker_train_and_checkpoint_inside_the_image(image, data):
    _, rootfs = image
    shutil.copytree(data, os.path.join(rootfs, "data"))
    script = """
ps_server --checkpoint_uri=/checkpoints > /ps.log 2>&1 &
ps=$!
ps_worker --model=deepfm --train_files='/data/train-*' --eval_files=/data/test.tfrecords \
  --epochs=1 --batch_size=256 --log_every_steps=20 > /worker.log 2>&1
worker=$?
kill -TERM $ps
wait $ps
server=$?
psctl --checkpoint_uri=/checkpoints checkpoints > /psctl.log 2>&1
echo "worker=$worker server=$server psctl=$?"
"""
    result = in_container(rootfs, script)
    logs = {n: open(os.path.join(rootfs, n)).read() for n in ("ps.log", "worker.log", "psctl.log")}
    assert "worker=0 server=0 psctl=0" in result.stdout, (result.stdout, logs)
    steps, examples, lost = DONE.search(logs["worker.log"]).groups()
    assert (int(examples), int(lost)) == (20000, 0), logs["worker.log"][-2000:]
    auc = float(AUC.search(logs["worker.log"]).group(1))
    print(f"in the image: {steps} steps, held-out AUC {auc:.4f}")
    assert auc > 0.70  # planted AUC 0.816; an untrained model gives 0.5
    # SIGTERM's final checkpoint, at the last step, listed by psctl.
    checkpoints = [d for d in os.listdir(os.path.join(rootfs, "checkpoints")) if "ckpt-" in d]
    assert checkpoints == [f"ckpt-{int(steps):010d}-" + checkpoints[0].rsplit("-", 1)[1]]
    listed = re.search(r"(ckpt-\S+)\s+latest\s+(\d+)", logs["psctl.log"])
    assert listed and listed.groups() == (checkpoints[0], steps), logs["psctl.log"]


def opt_ml(rootfs, data, hyperparameters):
    """/opt/ml as SageMaker gives a bring-your-own container: config JSON
    files and channel directories, no SM_* variables."""
    ml = os.path.join(rootfs, "opt", "ml")
    config = os.path.join(ml, "input", "config")
    os.makedirs(config)
    train = os.path.join(ml, "input", "data", "train")
    evaluation = os.path.join(ml, "input", "data", "eval")
    os.makedirs(train)
    os.makedirs(evaluation)
    for name in os.listdir(data):
        if name.startswith("train-"):
            shutil.copy(os.path.join(data, name), train)
    shutil.copy(os.path.join(data, "test.tfrecords"), evaluation)
    files = {
        "resourceconfig.json": {"current_host": "algo-1", "hosts": ["algo-1"]},
        # The SageMaker SDK JSON-encodes every value.
        "hyperparameters.json": {k: json.dumps(v) for k, v in hyperparameters.items()},
        "inputdataconfig.json": {
            "train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"},
            "eval": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"},
        },
    }
    for name, content in files.items():
        with open(os.path.join(config, name), "w") as f:
            json.dump(content, f)
    os.makedirs(os.path.join(ml, "checkpoints"))
    return ml


def layers(archive):
    inspected = run(["skopeo", "inspect", f"oci-archive:{archive}"])
    assert inspected.returncode == 0, inspected.stdout
    return json.loads(inspected.stdout)["Layers"]


def test_sagemaker_image_trains_from_opt_ml_and_writes_the_model(image, sagemaker_image, data):
    archive, rootfs = sagemaker_image
    # psrt's image layer as it is, then one layer: a registry holding both
    # images stores the first once.
    base_layers, sagemaker_layers = layers(image[0]), layers(archive)
    assert sagemaker_layers[:-1] == base_layers and len(sagemaker_layers) == len(base_layers) + 1
    inspected = json.loads(run(["skopeo", "inspect", "--config", f"oci-archive:{archive}"]).stdout)
    entrypoint = inspected["config"]["Entrypoint"]
    assert entrypoint == ["python3", "/opt/psrt/entry.py"]
    assert {"2222/tcp", "2223/tcp", "2224/tcp"} <= set(inspected["config"]["ExposedPorts"])
    ml = opt_ml(
        rootfs, data, {"model": "deepfm", "epochs": 1, "batch_size": 256, "log_every_steps": 20}
    )
    # SageMaker runs `docker run <image> train`, with the image's env.
    env = " ".join(e for e in inspected["config"]["Env"] if not e.startswith("PATH="))
    result = in_container(
        rootfs,
        f"env {env} {' '.join(entrypoint)} train",
        hosts="127.0.0.1 localhost algo-1",
        hostname="algo-1",
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "algo-1 (1 of 1, chief)" in result.stdout
    # The PS on 2223, as SageMaker's TensorFlow toolkit lays it out.
    assert "ps_server task 0 of 1 serving on port 2223" in result.stdout
    with open(os.path.join(ml, "model", "psrt_model.json")) as f:
        model = json.load(f)
    assert model["hosts"] == ["algo-1"] and model["hyperparameters"]["model"] == "deepfm"
    assert float(model["final"]["eval_auc"]) > 0.70, model
    # The numpy export SageMaker uploads from /opt/ml/model, and the
    # checkpoint it syncs from /opt/ml/checkpoints.
    with open(os.path.join(ml, "model", "export", "index.json")) as f:
        exported = json.dumps(json.load(f))
    assert "deepfm/factors" in exported, exported[:2000]
    assert [d for d in os.listdir(os.path.join(ml, "checkpoints")) if d.startswith("ckpt-")]
    assert not os.path.exists(os.path.join(ml, "output", "failure"))
