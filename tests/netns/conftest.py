"""The training data every namespace test uses (generated once), the
launchers a test left running stopped after it, and a failed test's logs
kept where Bazel keeps a test's outputs."""
import os
import shutil

import pytest

import netns_util


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    return netns_util.make_training_data(tmp_path_factory.mktemp("ctr"))


@pytest.fixture(autouse=True)
def stop_leftover_launchers():
    """A test that fails (or times out) before its launcher exits would
    leave that cluster running into the next test: stop it."""
    yield
    while netns_util.LAUNCHED:
        netns_util.stop(netns_util.LAUNCHED.pop())


# A failed test's logs (the launcher's, each PS's and worker's) are all that
# tells what happened in its processes, and its tmp_path goes with the
# sandbox: copied under Bazel's undeclared outputs (bazel-testlogs/<test>/
# test.outputs/outputs.zip, which CI keeps with the failure).
KEPT_LOG_BYTES = 64 << 20


def keep_logs(item):
    tmp = item.funcargs.get("tmp_path")
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if tmp is None or not outputs:
        return
    kept = 0
    for folder, _, files in os.walk(tmp):
        for name in sorted(files):
            source = os.path.join(folder, name)
            if not name.endswith(".log") or kept + os.path.getsize(source) > KEPT_LOG_BYTES:
                continue
            target = os.path.join(outputs, item.name, os.path.relpath(source, tmp))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
            kept += os.path.getsize(source)
    print(f"\n{item.name} failed: its logs ({kept} bytes) kept in {outputs}/{item.name}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        keep_logs(item)
