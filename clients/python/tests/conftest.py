"""Fixtures: real ps_server processes on loopback ports."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the psrt package

import psrt  # noqa: E402


def _binary(env_name, relative):
    path = os.environ.get(env_name)
    if path:
        return path
    for base in (
        os.environ.get("TEST_SRCDIR", ""),
        os.getcwd(),
        os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "bazel-bin"),
    ):
        for candidate in (
            os.path.join(base, "psrt", relative),
            os.path.join(base, relative),
        ):
            if os.path.exists(candidate):
                return candidate
    raise RuntimeError(f"{relative} not found: build it with bazel or set {env_name}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, num_ps, flags=(), client_kwargs=None, distinct_hosts=False, workers=0):
        self.client_kwargs = client_kwargs or {}
        # IP literals: no DNS resolver (c-ares leaks a few bytes at exit, which
        # LeakSanitizer reports for the C++ helper under --config=asan).
        # distinct_hosts: PS i on 127.0.0.<i+1>, a host of its own as far as
        # --replicas placement goes (a backup is never on its primary's host).
        self.addresses = [
            f"127.0.0.{i + 1 if distinct_hosts else 1}:{free_port()}" for i in range(num_ps)
        ]
        self.spec = {"cluster": {"ps": self.addresses}}
        if workers:  # sync/SSP pushes name their worker count: the spec's
            self.spec["cluster"]["worker"] = [f"127.0.0.1:{free_port()}" for _ in range(workers)]
        self.logs = tempfile.mkdtemp(prefix="psrt_py_")
        self.procs = []
        binary = _binary("PSRT_PS_SERVER", "ps_server/ps_server")
        for i in range(num_ps):
            log = open(os.path.join(self.logs, f"ps_{i}.log"), "w")
            self.procs.append(
                subprocess.Popen(
                    [
                        binary,
                        f"--cluster={json.dumps(self.spec)}",
                        f"--task_index={i}",
                        "--metrics_port=0",
                        *flags,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        client = self.client()
        client.wait_for_servers(30)
        client.close()

    def kill(self, i):
        """SIGKILL to PS i; waits for it to exit."""
        self.procs[i].kill()
        self.procs[i].wait()

    def restart(self, i, flags=()):
        """Kills PS i (SIGKILL) and starts it again on its port."""
        self.procs[i].kill()
        self.procs[i].wait()
        log = open(os.path.join(self.logs, f"ps_{i}.log"), "a")
        self.procs[i] = subprocess.Popen(
            self.procs[i].args + list(flags), stdout=log, stderr=subprocess.STDOUT
        )
        client = self.client()
        client.wait_for_servers(30)
        client.close()

    def client(self, **kwargs):
        return psrt.Client(self.spec, **{**self.client_kwargs, **kwargs})

    def log_tails(self, lines=30):
        """The last lines of every PS's log, for an assertion's message."""
        out = []
        for i in range(len(self.procs)):
            with open(os.path.join(self.logs, f"ps_{i}.log")) as f:
                tail = f.read().splitlines()[-lines:]
            out.append(f"--- ps_{i}.log (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(out)

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def cluster2():
    c = Cluster(2)
    yield c
    c.stop()


@pytest.fixture
def make_cluster():
    made = []

    def make(num_ps, flags=(), client_kwargs=None, distinct_hosts=False, workers=0):
        c = Cluster(num_ps, flags, client_kwargs, distinct_hosts, workers)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def cpp_push():
    """Pushes through the C++ client (clients/python/tests/cpp_push_helper)."""
    binary = _binary("PSRT_CPP_PUSH_HELPER", "clients/python/tests/cpp_push_helper")

    def push(cluster, variable, grads, ids=None, wire_dtype="fp32"):
        with tempfile.TemporaryDirectory() as d:
            args = [
                binary,
                f"--cluster={json.dumps(cluster.spec)}",
                f"--variable={variable}",
                f"--wire_dtype={wire_dtype}",
            ]
            grads_path = os.path.join(d, "grads")
            grads.astype("<f4").tofile(grads_path)
            args.append(f"--grads_file={grads_path}")
            if ids is not None:
                ids_path = os.path.join(d, "ids")
                ids.astype("<i8").tofile(ids_path)
                args.append(f"--ids_file={ids_path}")
            subprocess.run(args, check=True, capture_output=True)

    return push
