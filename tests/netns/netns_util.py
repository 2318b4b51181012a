"""Shared by the namespace tests: paths, the skip rule, log helpers."""
import functools
import os
import re
import signal
import subprocess
import sys
import time

import pytest

ROOT = (
    os.path.join(os.environ.get("TEST_SRCDIR", ""), "psrt")
    if os.environ.get("TEST_SRCDIR")
    else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
sys.path.insert(0, os.path.join(ROOT, "deploy", "local"))
import netns  # noqa: E402

WHY_NOT = netns.available()


def needs_netns(test):
    """Skips a namespace test where namespaces cannot be made (not root, no
    iproute2) -- except in CI (CI=true), which runs as root: there it fails,
    so a broken environment cannot pass as green."""
    if WHY_NOT is None:
        return test
    if os.environ.get("CI") == "true":

        @functools.wraps(test)
        def fail(*args, **kwargs):
            pytest.fail(f"CI must run the namespace tests, but: {WHY_NOT}")

        return fail
    return pytest.mark.skip(reason=f"no network namespaces: {WHY_NOT}")(test)


DONE = re.compile(
    r"done: steps=(\d+) examples=(\d+) seconds=([\d.]+) examples/s=([\d.]+) "
    r"bad_records=\d+ ps_recoveries=(\d+) lost_pushes=(\d+)"
)
AUC = re.compile(r"final eval_auc=([\d.]+)")


def make_training_data(out):
    """The CTR data every namespace test (and tools/bench/failover_soak.py)
    trains on, written under `out`: 60,000 training and 5,000 held-out
    examples as TFRecords."""
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


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def wait_for(path, pattern, timeout=120):
    """Waits until the file `path` (or any of the list of files `path`)
    matches `pattern`; fails after `timeout` seconds quoting their tails."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(os.path.exists(p) and re.search(pattern, read(p)) for p in paths):
            return
        time.sleep(0.1)
    tails = "\n".join(
        f"{p}:\n{read(p)[-2000:] if os.path.exists(p) else '(no file)'}" for p in paths
    )
    raise AssertionError(f"{', '.join(map(str, paths))} never matched {pattern!r}:\n{tails}")


# The launchers launch() started: conftest.py stops any a test left running
# (failed, or timed out, before it ended), so a test need not catch and stop.
LAUNCHED = []


def stop(proc, grace=45):
    """Ends a launcher as an operator would: SIGTERM, on which it stops its
    servers and workers (SIGKILL after its own 30 s grace) and removes its
    namespaces; SIGKILL if it is still there after `grace` seconds. A
    launcher killed outright would leave its servers running on the ports
    and namespaces the next test uses."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def launch_command(logs, hosts, extra, command):
    """deploy/local/launch.py with `hosts` hosts (launcher flags `extra`),
    each running `command`; registered for conftest.py to stop."""
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(ROOT, "deploy/local/launch.py"),
            f"--hosts={hosts}",
            f"--logs={logs}",
            f"--bin_dir={ROOT}",
            *extra,
            "--",
            *command,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    LAUNCHED.append(proc)
    return proc


def launch(logs, data, hosts, extra, worker_flags):
    """launch_command running ps_worker DeepFM on the test data with
    `worker_flags` on each host."""
    return launch_command(
        logs,
        hosts,
        extra,
        [
            os.path.join(ROOT, "ps_worker/ps_worker"),
            "--model=deepfm",
            f"--train_files={data}/train-*",
            f"--eval_files={data}/test.tfrecords",
            "--batch_size=256",
            *worker_flags,
        ],
    )


def kill_worker_1_at_step_63(logs):
    """SIGKILLs worker 1 once it logged step 63; returns when it did. The
    workers run with --log_every_steps=2{index} (per-worker values), by
    which worker 1's process is found."""
    wait_for(os.path.join(logs, "worker_1.log"), r"step=63 ")
    pid = subprocess.run(
        ["pgrep", "-f", r"ps_worker/ps_worker .*--log_every_steps=21"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    os.kill(int(pid), signal.SIGKILL)
    return time.time()
