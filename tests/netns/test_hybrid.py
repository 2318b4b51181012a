"""ps_worker --dense_sync=allreduce on hosts in network namespaces: the
dense layers all-reduced among the workers (Gloo over the hosts' veth
links), the embeddings on the PS. Every worker ends with the same dense
bits; a worker killed with SIGKILL is named by the others within the
timeout; with --restart_workers the ring forms again and the run
completes, the dense bits equal again. Namespaces need root: see
netns_util.needs_netns."""
import os
import re

import pytest

import netns_util
from netns_util import AUC, DONE, needs_netns, read

DIGEST = re.compile(r"dense values crc32c=([0-9a-f]{8})")
ALLREDUCE = re.compile(r"dense all-reduce: (\d+) bytes a step, ([\d.]+) ms mean")


def launch(logs, data, hosts, extra, worker_flags):
    return netns_util.launch(
        logs,
        data,
        hosts,
        extra,
        ["--dense_sync=allreduce", "--eval_on_all_workers", *worker_flags],
    )


def worker_log(logs, w):
    return read(os.path.join(logs, f"worker_{w}.log"))


def digests(logs, workers):
    out = []
    for w in range(workers):
        found = DIGEST.findall(worker_log(logs, w))
        assert found, f"worker {w} printed no dense digest:\n{worker_log(logs, w)[-3000:]}"
        out.append(found[-1])
    return out


@needs_netns
@pytest.mark.parametrize(
    "hosts,prefix,subnet", [(2, "psrth2", "10.96.0"), (3, "psrth3", "10.97.0")]
)
def test_hybrid_dense_bits_equal_on_every_host(data, tmp_path, hosts, prefix, subnet):
    proc = launch(
        tmp_path,
        data,
        hosts,
        [f"--netns={prefix}", f"--netns_subnet={subnet}"],
        ["--mode=sync", "--max_steps=150", "--log_every_steps=50"],
    )
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    found = digests(tmp_path, hosts)
    print(f"{hosts} hosts: dense digests {found}")
    assert len(set(found)) == 1, found
    for w in range(hosts):
        log = worker_log(tmp_path, w)
        # Each worker's ring listens on its own host (TF_CONFIG's name).
        assert f"listening on algo-{w + 1})" in log, log[-2000:]
        assert "150 updates, 0 dropped" in log, log[-2000:]
        done = DONE.findall(log)[-1]
        size, ms = ALLREDUCE.search(log).groups()
        print(f"worker {w}: {float(done[3]):.0f} examples/s; all-reduce {size} bytes in {ms} ms")
        auc = float(AUC.search(log).group(1))
        assert auc > 0.7, f"worker {w} held-out AUC {auc}"
    print(f"held-out AUC {float(AUC.search(worker_log(tmp_path, 0)).group(1)):.4f}")


# Worker flags that let the tests find worker 1's process (a per-worker
# flag value) and kill it mid-run.
KILLABLE = ["--sync_timeout_secs=5", "--log_every_steps=2{index}"]


def test_hybrid_killed_worker_is_named_within_the_timeout(data, tmp_path):
    """No restarts: worker 1 killed with SIGKILL mid-run; worker 0 fails
    naming it within the ring's timeout (and its margin). No namespaces
    needed."""
    proc = launch(
        tmp_path,
        data,
        2,
        ["--base_port=26500"],
        ["--max_steps=100000", *KILLABLE],
    )
    killed = netns_util.kill_worker_1_at_step_63(tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out[-4000:]
    log = worker_log(tmp_path, 0)
    failed = re.search(r"training failed: .*all-reduce ring .* broke[^\n]*", log)
    assert failed, log[-4000:]
    print(failed.group(0)[:400])
    assert re.search(r"worker 1 \([\d.]+:\d+\) is gone", failed.group(0)), failed.group(0)
    # Worker 0's log mtime: when it failed, at most the timeout and its
    # margin after the kill (5 + 2 s; 3 s more for a loaded machine).
    took = os.path.getmtime(os.path.join(tmp_path, "worker_0.log")) - killed
    print(f"worker 0 named worker 1 {took:.1f} s after the kill")
    assert took < 5 + 2 + 3


@needs_netns
def test_hybrid_killed_worker_restarts_and_the_ring_forms_again(data, tmp_path):
    proc = launch(
        tmp_path,
        data,
        2,
        [
            "--netns=psrth4",
            "--netns_subnet=10.98.0",
            "--base_port=26600",
            "--restart_workers=1",
        ],
        ["--max_steps=400", "--ring_reform_secs=60", *KILLABLE],
    )
    netns_util.kill_worker_1_at_step_63(tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    assert "launch: worker1 exited (status -9); restarting it (1 of 1)" in out
    survivor, restarted = worker_log(tmp_path, 0), worker_log(tmp_path, 1)
    assert "forms again" in survivor, survivor[-3000:]
    assert re.search(r"ring generation 1, .*training from step \d+", restarted), restarted[-3000:]
    start = int(re.findall(r"training from step (\d+)", restarted)[-1])
    print(f"the restarted worker joined ring generation 1 at step {start}")
    assert start > 63
    found = digests(tmp_path, 2)
    print(f"dense digests after the restart: {found}")
    assert found[0] == found[1]
    # The survivor dropped the one step whose all-reduce broke.
    assert re.search(r"\d+ updates, 1 dropped; ring generation 1", survivor), survivor[-2000:]
    rows = [DONE.findall(worker_log(tmp_path, w))[-1] for w in range(2)]
    assert int(rows[0][0]) == 400 and int(rows[1][0]) == 400
