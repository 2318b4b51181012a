"""Shared by the namespace tests: paths, the skip rule, log helpers."""
import os
import re
import sys
import time

import pytest

ROOT = os.path.join(os.environ.get("TEST_SRCDIR", ""), "psrt") \
    if os.environ.get("TEST_SRCDIR") else os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "deploy", "local"))
import netns  # noqa: E402

WHY_NOT = netns.available()
needs_netns = pytest.mark.skipif(WHY_NOT is not None, reason=f"no network namespaces: {WHY_NOT}")
DONE = re.compile(r"done: steps=(\d+) examples=(\d+) seconds=([\d.]+) examples/s=([\d.]+) "
                  r"bad_records=\d+ ps_recoveries=(\d+) lost_pushes=(\d+)")
AUC = re.compile(r"final eval_auc=([\d.]+)")


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def wait_for(path, pattern, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and re.search(pattern, read(path)):
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never matched {pattern!r}:\n{read(path)[-2000:]}")


