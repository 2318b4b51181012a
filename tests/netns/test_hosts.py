"""Several hosts on one machine, each a network namespace with its own
address (deploy/local/netns.py), one ps_server + one ps_worker per host, run
by deploy/local/launch.py --netns: DeepFM on 3 hosts, a partition of one
host (its veth dropped for longer than the clients' keepalive), and a
worker killed with SIGKILL that the launcher restarts. Namespaces need root:
the tests skip, saying why, where they cannot be made.
"""
import json
import os
import re
import signal
import subprocess
import time

import pytest

import netns_util
from netns_util import AUC, DONE, ROOT, needs_netns, netns, read, wait_for


def launch(logs, data, hosts, extra, worker_flags):
    return netns_util.launch(logs, data, hosts, extra, ["--log_every_steps=20", *worker_flags])


def launch_replicated(logs, data, prefix, subnet, port, ps_flags, worker_flags, hosts=3):
    """`hosts` hosts in namespaces `prefix` (addresses `subnet`.1-N),
    --replicas=2, the launcher restarting a ps_server that dies once."""
    return launch(
        logs,
        data,
        hosts,
        [
            f"--netns={prefix}",
            f"--netns_subnet={subnet}",
            f"--base_port={port}",
            "--restart_ps=1",
            "--ps_flag=--replicas=2",
            *ps_flags,
        ],
        worker_flags,
    )


def finish(proc, timeout=300):
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def done_lines(logs, workers):
    rows = []
    for w in range(workers):
        found = DONE.findall(read(os.path.join(logs, f"worker_{w}.log")))
        assert found, f"worker {w} printed no done line"
        rows.append(found[-1])
    return rows


def assert_finished_losing_nothing(logs, rows, steps):
    """Every worker's done line (`rows`) counts `steps` steps, no PS
    recovery and no lost push; if one counts either, the failure quotes
    what each worker logged about it (the status that ended its retries,
    the pushes it gave up), as a rare failure in CI leaves nothing else to
    read."""
    for row in rows:
        assert int(row[0]) == steps
    if all(int(row[4]) == 0 and int(row[5]) == 0 for row in rows):
        return
    why = []
    for w in range(len(rows)):
        lines = read(os.path.join(logs, f"worker_{w}.log")).splitlines()
        first_failure = next((i for i, line in enumerate(lines) if "PS failure" in line), 0)
        # The client's last retries before the first recovery (their
        # statuses say what the PS answered), then what the trainer said.
        retries = [line for line in lines[:first_failure] if line[:1] == "W"]
        said = [
            line
            for line in lines
            if any(k in line for k in ("PS failure", "counted lost", "servers are back"))
            or re.match(r"[EF]\d{8} ", line)
        ]
        why.append("\n".join([f"worker {w}: done {rows[w]}", *retries[-8:], *said[-12:]]))
    raise AssertionError("recoveries or lost pushes:\n" + "\n".join(why))


PSCTL = os.path.join(ROOT, "tools/psctl/psctl")
# DeepFM's shard copies at --replicas=2 on 3 PS (hash embeddings in 3
# shards, 7 dense variables in one).
COPIES_ON_3_PS = 2 * (2 * 3 + 7)

# A shard copy's line in `psctl variables`: its PS and its version (the
# pushes applied to it).
SHARD_VERSION = re.compile(r"^\s+shard \d+\s+PS (\d+)\s.*\sversion (\d+)", re.M)


def assert_each_push_applied_once(out, pushes, copies):
    """The launcher's output `out` holds `psctl variables` (its --then):
    `copies` shard copies, each at version `pushes` (the pushes every
    worker made to it: short, one was lost; past it, one was applied
    twice)."""
    versions = SHARD_VERSION.findall(out)
    assert len(versions) == copies, out[-4000:]
    assert {v for _, v in versions} == {str(pushes)}, versions


@needs_netns
def test_three_hosts_train_deepfm(data, tmp_path):
    proc = launch(tmp_path, data, 3, ["--netns=psrtt1", "--netns_subnet=10.78.0"], ["--epochs=2"])
    out = finish(proc)
    assert "ps_servers at ['algo-1:2223', 'algo-2:2223', 'algo-3:2223']" in out
    rows = done_lines(tmp_path, 3)
    for w, row in enumerate(rows):
        print(f"host algo-{w + 1}: {row[1]} examples, {float(row[3]):.0f} examples/s")
        assert int(row[1]) == 40000  # 2 epochs of its third of 60,000
    auc = float(AUC.search(read(os.path.join(tmp_path, "worker_0.log"))).group(1))
    print(f"eval AUC {auc:.4f}")
    assert auc > 0.75
    assert not [n for n in os.listdir("/var/run/netns") if n.startswith("psrtt1-")]


@needs_netns
def test_partition_of_one_host_recovers(data, tmp_path):
    net = netns.HostNetwork("psrtt2", 3, "10.79.0")
    proc = launch(
        tmp_path,
        data,
        3,
        ["--netns=psrtt2", "--netns_subnet=10.79.0"],
        # 200 steps of 256 per worker: 2.6 passes over each worker's 20,000
        # examples (the 3-host test's 2 epochs reach 0.81; 500 steps, 6.4
        # passes, overfit to 0.75-0.80 depending on who waited when).
        ["--epochs=0", "--max_steps=200", "--ps_recovery_secs=120"],
    )
    wait_for(os.path.join(tmp_path, "worker_0.log"), r"step=40 ")
    net.set_link(2, up=False)  # algo-3: its PS and worker cut off
    time.sleep(20)  # > keepalive 10 s + 5 s: calls fail, clients retry
    # ... and on until a worker's retries ran out and it began to
    # recover: how long retries last depends on how each connection
    # learned of the cut (a call hanging until the keepalive, or a
    # connect failing at once), so 20 s alone was sometimes absorbed
    # by the client's retries (0 recoveries in 1 CI run).
    wait_for([os.path.join(tmp_path, f"worker_{w}.log") for w in range(3)], "PS failure", 60)
    net.set_link(2, up=True)
    finish(proc)
    rows = done_lines(tmp_path, 3)
    recoveries = sum(int(r[4]) for r in rows)
    logs = "".join(read(os.path.join(tmp_path, f"worker_{w}.log")) for w in range(3))
    print(f"recoveries {[int(r[4]) for r in rows]}, lost pushes {[int(r[5]) for r in rows]}")
    assert recoveries >= 1, logs[-3000:]
    assert all(int(r[0]) == 200 for r in rows)
    auc = float(AUC.search(read(os.path.join(tmp_path, "worker_0.log"))).group(1))
    print(f"eval AUC after the partition {auc:.4f}")
    assert auc > 0.78  # 0.808-0.812 in 4 runs here


def test_killed_worker_is_restarted_and_rejoins(data, tmp_path):
    proc = launch(
        tmp_path,
        data,
        2,
        ["--restart_workers=1", "--base_port=26100"],
        # (a per-worker flag value to find worker 1's process by)
        ["--epochs=0", "--max_steps=300", "--log_every_steps=2{index}"],
    )
    worker1 = os.path.join(tmp_path, "worker_1.log")
    netns_util.kill_worker_1_at_step_63(tmp_path)
    out = finish(proc)
    assert "launch: worker1 exited (status -9); restarting it (1 of 1)" in out
    log = read(worker1)
    assert log.count("training deepfm") == 2, log[-2000:]
    rows = done_lines(tmp_path, 2)
    # The other worker was never disturbed; the restarted one trained again.
    assert int(rows[0][0]) == 300 and int(rows[1][0]) == 300


def test_sync_mode_names_a_dead_worker_under_the_launcher(data, tmp_path):
    """In sync mode a worker that dies does not make the launcher stop the
    others at once: they wait --sync_timeout_secs and then fail naming it,
    as the docs promise. No namespaces needed."""
    worker = " ".join(
        [
            os.path.join(ROOT, "ps_worker/ps_worker"),
            "--model=lr",
            f"--train_files={data}/train-*",
            "--batch_size=256",
            "--mode=sync",
            "--max_steps=200",
            "--sync_timeout_secs=5",
            "--log_every_steps=50",
        ]
    )
    proc = netns_util.launch_command(
        tmp_path,
        2,
        ["--base_port=26300"],
        [
            "/bin/sh",
            "-c",
            f'if [ "$PSRT_WORKER_INDEX" = 1 ]; then echo dying; exit 3; fi; exec {worker}',
        ],
    )
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 1, out[-4000:]
    assert "worker1 failed (exit status 3); the other workers run on" in out, out[-4000:]
    log = read(os.path.join(tmp_path, "worker_0.log"))
    assert "still missing: worker 1" in log, log[-4000:]


def kill_ps_at_step(logs, port, step):
    """SIGKILLs PS 1 of the cluster on `port` once worker 0 logged `step`."""
    wait_for(os.path.join(logs, "worker_0.log"), rf"step={step} ")
    os.kill(ps_pid(1, port), signal.SIGKILL)


def ps_pid(index, port):
    """The pid of the ps_server whose TF_CONFIG names PS `index` of the
    cluster on `port` (the launcher passes the task in the environment)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"ps_server/ps_server" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if f'"type": "ps", "index": {index}'.encode() in env and f":{port}".encode() in env:
            return int(pid)
    raise AssertionError(f"no ps_server for PS {index} on port {port}")


@pytest.mark.parametrize("victim", [0, 1])
def test_killed_ps_is_restarted_and_restores(data, tmp_path, victim):
    """launch.py --restart_ps: a PS killed with SIGKILL -- PS 0 too, which
    coordinates checkpoints and holds the catalog workers read -- is started
    again with --restore=auto, restores its shards from the newest
    checkpoint, and training completes. No namespaces needed."""
    ckpt = os.path.join(tmp_path, "ckpt")
    port = 26400 + 10 * victim
    proc = launch(
        tmp_path,
        data,
        2,
        [
            "--restart_ps=1",
            f"--base_port={port}",
            f"--ps_flag=--checkpoint_uri={ckpt}",
            "--ps_flag=--checkpoint_every_steps=20",
        ],
        ["--epochs=0", "--max_steps=400", "--log_every_steps=20"],
    )
    wait_for(os.path.join(tmp_path, "ps_0.log"), r"checkpoint \S+: \d+ files")
    os.kill(ps_pid(victim, port), signal.SIGKILL)
    out = finish(proc)
    assert (
        f"launch: ps{victim} exited (status -9); restarting it (1 of 1) " "with --restore=auto"
    ) in out, out[-4000:]
    log = read(os.path.join(tmp_path, f"ps_{victim}.log"))
    assert "restoring from" in log, log[-3000:]
    for row in done_lines(tmp_path, 2):
        assert int(row[0]) == 400


def test_replicated_ps_killed_fails_over_losing_nothing(data, tmp_path):
    """--replicas=2 on 3 hosts without namespaces (the launcher's loopback
    hosts 127.0.0.1-3, no root): PS 1 killed with SIGKILL mid-training. Its
    backup (PS 2, on 127.0.0.3) takes its shards over within seconds; every
    worker, the one on the dead PS's host included, finishes its steps with
    no PS recovery and no lost push; the launcher starts PS 1 again and it
    rejoins as a backup (copies from PS 0 and PS 2, whose pushes wait for
    it again once it caught up), then takes its shards back from PS 2
    (handback); the final checkpoint holds every shard."""
    ckpt = os.path.join(tmp_path, "ckpt")
    port = 26600
    proc = launch(
        tmp_path,
        data,
        3,
        [
            f"--base_port={port}",
            "--restart_ps=1",
            "--ps_flag=--replicas=2",
            f"--ps_flag=--checkpoint_uri={ckpt}",
            f"--then={PSCTL} variables",
        ],
        ["--epochs=0", "--max_steps=300"],
    )
    kill_ps_at_step(tmp_path, port, 60)
    out = finish(proc)
    assert "3 host(s) on loopback addresses 127.0.0.1..127.0.0.3" in out, out[-4000:]
    assert "ps1 exited (status -9); with replicas" in out, out[-4000:]
    assert "to rejoin as a backup" in out, out[-4000:]
    ps1 = read(os.path.join(tmp_path, "ps_1.log"))
    assert "rejoined as a backup" in ps1, ps1[-3000:]
    print([line for line in ps1.splitlines() if "rejoined as a backup" in line][0])
    for ps in (0, 2):
        log = read(os.path.join(tmp_path, f"ps_{ps}.log"))
        assert "caught up" in log, log[-3000:]
    again = re.search(r"serves its \d+ shard\(s\) again[^\n]*", ps1)
    assert again, ps1[-3000:]
    print(again.group(0))
    rows = done_lines(tmp_path, 3)
    print(f"recoveries {[int(r[4]) for r in rows]}, lost pushes {[int(r[5]) for r in rows]}")
    assert_finished_losing_nothing(tmp_path, rows, 300)
    assert_each_push_applied_once(out, 3 * 300, COPIES_ON_3_PS)
    took_over = read(os.path.join(tmp_path, "ps_2.log"))
    assert "took over" in took_over, took_over[-3000:]
    ps0 = read(os.path.join(tmp_path, "ps_0.log"))
    # Every shard saved once, by whichever PS served it at the time (the
    # manifest must name every shard).
    assert re.search(r"checkpoint \S+: \d+ files", ps0), ps0[-3000:]
    auc = float(AUC.search(read(os.path.join(tmp_path, "worker_0.log"))).group(1))
    print(f"eval AUC after the failover {auc:.4f}")
    assert auc > 0.75


@needs_netns
def test_replicated_two_hosts_fail_over_losing_nothing(data, tmp_path):
    """--replicas=2 on 2 hosts, the layout most jobs run: the two workers
    vote beside the two PS (4 voters, a majority of 3). Each PS in turn, in
    a run of its own, mid-training:
      - PS 1 killed with SIGKILL: the launcher starts it again at once, its
        new process tells PS 0, which takes its shards over at once;
      - PS 0 stopped (SIGSTOP) for 12 s, alive but silent: its lease ends,
        the workers and PS 1 vote it out and PS 1 takes its shards over
        within 5 s; resumed, PS 0 learns it was replaced.
    Either way the PS rejoins as a backup and takes its shards back
    (handback), and every worker finishes its steps with no PS recovery and
    no lost push, and every copy of every shard applied each push once (its
    version, read by `psctl variables` before the servers stop, is 2 x the
    steps).

    Each run trains on after the fault for longer than the handback takes:
    the rejoined PS asks for its shards back once its copy has caught up
    with the stream, within 0.2-0.6 s in most runs here, and up to about
    2 s plus its queue when pushes come in faster than it applies them
    (the primary then holds pushes until it is one call behind). The 12 s
    stop leaves the SIGSTOP run plenty; the killed run takes the same
    examples in 800 steps of 96 (not 300 of 256), about 3x as long past
    the kill (300 steps ended before the handback in 1 of 6 runs here);
    more steps of 256 would train the small data set more epochs and
    overfit it (900 steps: AUC 0.74-0.77).
    """
    for victim, how, prefix, subnet, port, steps, batch in (
        (1, signal.SIGKILL, "psrtt14", "10.93.0", 27100, 800, 96),
        (0, signal.SIGSTOP, "psrtt15", "10.94.0", 27120, 300, 256),
    ):
        logs = os.path.join(tmp_path, f"ps{victim}_{how.name}")
        os.makedirs(logs)
        proc = launch_replicated(
            logs,
            data,
            prefix,
            subnet,
            port,
            [f"--ps_flag=--checkpoint_uri={logs}/ckpt", f"--then={PSCTL} variables"],
            ["--epochs=0", f"--max_steps={steps}", f"--batch_size={batch}"],
            hosts=2,
        )
        wait_for(os.path.join(logs, "worker_0.log"), r"step=60 ")
        pid = ps_pid(victim, port)
        os.kill(pid, how)
        hit_at = time.time()
        if how == signal.SIGSTOP:
            time.sleep(12)
            os.kill(pid, signal.SIGCONT)
        out = finish(proc)
        ps_logs = [read(os.path.join(logs, f"ps_{ps}.log")) for ps in range(2)]
        survivor = 1 - victim
        assert "2 worker(s) vote with the PS" in ps_logs[survivor], ps_logs[survivor][-3000:]
        took_over = log_time(ps_logs[survivor], "took over")
        print(f"PS {victim} {how.name}: PS {survivor} took over {took_over - hit_at:.1f} s later")
        assert took_over - hit_at < 5, ps_logs[survivor][-3000:]
        if how == signal.SIGSTOP:
            assert "a majority" in ps_logs[survivor], ps_logs[survivor][-3000:]
            assert "learned it was replaced" in ps_logs[victim], ps_logs[victim][-3000:]
        assert "rejoined as a backup" in ps_logs[victim], ps_logs[victim][-3000:]
        again = re.search(r"serves its \d+ shard\(s\) again[^\n]*", ps_logs[victim])
        assert again, ps_logs[victim][-3000:]
        print(again.group(0))
        rows = done_lines(logs, 2)
        print(f"recoveries {[int(r[4]) for r in rows]}, lost pushes {[int(r[5]) for r in rows]}")
        assert_finished_losing_nothing(logs, rows, steps)
        assert_each_push_applied_once(out, 2 * steps, 22)
        auc = float(AUC.search(read(os.path.join(logs, "worker_0.log"))).group(1))
        print(f"eval AUC after the failover {auc:.4f}")
        assert auc > 0.75


BOUNDED_TABLE_FLAGS = ["--epochs=0", "--max_steps=300", "--admission_min_count=2", "--ssd_tier"]
ON_DISK = re.compile(r"on disk (\d+) rows")


@needs_netns
def test_replicated_two_hosts_bounded_tables_lose_nothing(data, tmp_path):
    """The hash tables bounded, on 2 hosts: admission min_count 2, the SSD
    tier, and a --memory_budget_mb that holds about half of the rows in
    memory (the rest spilled as pushes make room). First with R=1 (the
    control), then with --replicas=2 and twice the budget (each PS holds
    its shards and a copy of the other's) and PS 1 killed with SIGKILL
    mid-training: every worker reports lost_pushes=0, the restarted PS
    rejoins and takes its shards back, `psctl replicas` (run by the
    launcher's --then before the servers stop) finds both copies of every
    shard equal, every copy of every shard applied exactly the 600 pushes
    the workers made (2 x 300 steps: none lost, none applied twice), rows
    went to disk on both runs, and both held-out AUCs are at least 0.79.

    The versions, not the AUC, say that nothing was lost: losing PS 1's
    shards (R=1, the killed PS restarted empty) leaves them short of 600,
    and a push applied twice (a worker's retry reaching the restarted PS
    after its handback, which did not know the push: fixed, 2026-12-02,
    seen as 601 on PS 1's three shards in 1 of 43 runs read) puts them
    past it. The AUC cannot tell either from the noise of one short async
    run: on the 2-vCPU VM, 2026-12-02, R=2 without the kill scored
    0.8111-0.8192 (40 runs), with it 0.8047-0.8188 (101 runs, two at
    0.8047 with every version 600), and losing the shards outright
    0.8075-0.8098 (3 runs, 2026-11-30). The floor only says the model
    trained (an untrained one scores about 0.5)."""
    runs = {}
    for replicas, budget_mb, prefix, subnet, port in (
        (1, 24, "psrtt18", "10.97.0", 27200),
        (2, 48, "psrtt19", "10.98.0", 27220),
    ):
        logs = os.path.join(tmp_path, f"r{replicas}")
        os.makedirs(logs)
        check = f"{PSCTL} variables" if replicas == 1 else f"{PSCTL} replicas && {PSCTL} variables"
        proc = launch(
            logs,
            data,
            2,
            [
                f"--netns={prefix}",
                f"--netns_subnet={subnet}",
                f"--base_port={port}",
                "--restart_ps=1",
                f"--ps_flag=--replicas={replicas}",
                f"--ps_flag=--memory_budget_mb={budget_mb}",
                f"--then={check}",
            ],
            BOUNDED_TABLE_FLAGS,
        )
        if replicas == 2:
            kill_ps_at_step(logs, port, 160)
        out = finish(proc)
        rows = done_lines(logs, 2)
        auc = float(AUC.search(read(os.path.join(logs, "worker_0.log"))).group(1))
        on_disk = sum(
            int(m.group(1))
            for line in out.splitlines()
            if "(backup of PS" not in line
            for m in [ON_DISK.search(line)]
            if m
        )
        runs[replicas] = auc
        print(
            f"R={replicas} --memory_budget_mb={budget_mb}: AUC {auc:.4f}, rows on disk "
            f"{on_disk}, lost pushes {[int(r[5]) for r in rows]}"
        )
        assert on_disk > 10000, out[-4000:]
        assert_finished_losing_nothing(logs, rows, 300)
        # Every step of each worker pushes to every shard.
        assert_each_push_applied_once(out, 2 * 300, 11 * replicas)
        if replicas == 2:
            assert "ps1 exited (status -9)" in out, out[-4000:]
            ps1 = read(os.path.join(logs, "ps_1.log"))
            assert "rejoined as a backup" in ps1, ps1[-3000:]
            assert re.search(r"serves its \d+ shard\(s\) again", ps1), ps1[-3000:]
            # psctl replicas exits 0 only if every shard has 2 equal copies
            # (the launch fails otherwise); its table is in the output.
            assert "copies (PS role version digest)" in out, out[-4000:]
    assert min(runs.values()) >= 0.79, runs


def log_time(log, text):
    """When the first glog line containing `text` was written (epoch s)."""
    for line in log.splitlines():
        m = re.match(r"[IWEF](\d{8} \d\d:\d\d:\d\d\.\d{6}) ", line)
        if m and text in line:
            return time.mktime(time.strptime(m.group(1)[:17], "%Y%m%d %H:%M:%S")) + float(
                "0." + m.group(1)[18:]
            )
    raise AssertionError(f"no line with {text!r}:\n{log[-3000:]}")


@needs_netns
def test_replicated_partition_fails_over_and_the_cut_off_primary_refuses(data, tmp_path):
    """--replicas=2 on 3 hosts: algo-2 (PS 1 and worker 1) cut off for 20 s.
    PS 1's lease ends within 2 s, so it refuses its own worker's pulls and
    pushes (none is acknowledged by a PS that may have been replaced); PS 2
    takes its shards over; when the link returns PS 1 learns it was
    replaced, rejoins as a backup and takes its shards back. Every worker
    finishes with no PS recovery and no lost push."""
    net = netns.HostNetwork("psrtt7", 3, "10.86.0")
    proc = launch(
        tmp_path,
        data,
        3,
        [
            "--netns=psrtt7",
            "--netns_subnet=10.86.0",
            "--base_port=26800",
            "--ps_flag=--replicas=2",
            f"--then={PSCTL} variables",
        ],
        # Worker 1 stands still while cut off; its steps after the link
        # returns must outlast PS 1's rejoin (a fresh-clone run with 200
        # steps ended 1.3 s after the return, between the rejoin's first two
        # attempts: the gRPC channels reconnect with backoff).
        ["--epochs=0", "--max_steps=600"],
    )
    wait_for(os.path.join(tmp_path, "worker_0.log"), r"step=40 ")
    net.set_link(1, up=False)  # algo-2: PS 1 and worker 1 cut off
    cut = time.time()
    time.sleep(20)
    net.set_link(1, up=True)
    back = time.time()
    out = finish(proc)
    rows = done_lines(tmp_path, 3)
    print(f"recoveries {[int(r[4]) for r in rows]}, lost pushes {[int(r[5]) for r in rows]}")
    assert_finished_losing_nothing(tmp_path, rows, 600)
    # Worker 1's retries after the link returned (to PS 2, or to PS 1
    # after its handback) applied once.
    assert_each_push_applied_once(out, 3 * 600, COPIES_ON_3_PS)
    ps1 = read(os.path.join(tmp_path, "ps_1.log"))
    assert "lost its lease" in ps1, ps1[-3000:]
    assert "learned it was replaced" in ps1, ps1[-3000:]
    # Back on the network, it rejoins as a backup of the shards it held.
    assert "rejoined as a backup" in ps1, ps1[-3000:]
    ps2 = read(os.path.join(tmp_path, "ps_2.log"))
    assert "took over" in ps2, ps2[-3000:]
    # No split brain: PS 1 stopped serving (its lease ended) before PS 2
    # started serving its shards. glog stamps each line with this machine's
    # clock (both processes share it) to the microsecond.
    lease_lost = log_time(ps1, "lost its lease")
    taken_over = log_time(ps2, "took over")
    print(
        f"link cut at {time.strftime('%H:%M:%S', time.localtime(cut))}: PS 1 lost its lease "
        f"{lease_lost - cut:.2f} s later, PS 2 took over after {taken_over - cut:.2f} s"
    )
    assert lease_lost < taken_over
    print(
        f"PS 1 rejoined {log_time(ps1, 'rejoined as a backup') - back:.2f} s "
        "after the link returned"
    )
    # Worker 1's pushes to PS 1 in the partition were not acknowledged
    # (lost_pushes=0 above: each was sent again, to PS 2 or, once PS 1 had
    # rejoined and taken its shards back, to PS 1 again: worker 1, cut off
    # with PS 1, may learn of the failover only after the handback).
    assert re.search(r"serves its \d+ shard\(s\) again", ps1), ps1[-3000:]
    auc = float(AUC.search(read(os.path.join(tmp_path, "worker_0.log"))).group(1))
    print(f"eval AUC after the partition {auc:.4f}")
    assert auc > 0.72  # 0.767-0.812 in 5 runs; worker 1 stood still 20 s


@needs_netns
def test_replicated_two_of_three_ps_killed(data, tmp_path):
    """--replicas=2 on 3 hosts: PS 0 and PS 1 killed with SIGKILL at once.
    PS 0's shards had their copies on PS 0 and PS 1 -- both gone -- so they
    are restored from the latest checkpoint (the updates since are lost, and
    PS 0's log says so); PS 1's shards have a live copy on PS 2, which takes
    them over losing nothing. The launcher restarts both; training ends with
    every shard at 2 copies."""
    ckpt = os.path.join(tmp_path, "ckpt")
    port = 26900
    proc = launch_replicated(
        tmp_path,
        data,
        "psrtt8",
        "10.87.0",
        port,
        [f"--ps_flag=--checkpoint_uri={ckpt}", "--ps_flag=--checkpoint_every_steps=20"],
        ["--epochs=0", "--max_steps=300"],
    )
    wait_for(os.path.join(tmp_path, "ps_0.log"), r"checkpoint \S+: \d+ files")
    wait_for(os.path.join(tmp_path, "worker_0.log"), r"step=60 ")
    pids = [ps_pid(0, port), ps_pid(1, port)]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    out = finish(proc)
    for ps in (0, 1):
        assert f"ps{ps} exited (status -9); with replicas" in out, out[-4000:]
    logs = [read(os.path.join(tmp_path, f"ps_{ps}.log")) for ps in range(3)]
    # PS 1's shards: PS 2 held a live copy and serves them, losing nothing.
    assert "took over 3 shard(s) of PS 1" in logs[2], logs[2][-3000:]
    # PS 0's shards: both copies died; the log says they come from the
    # checkpoint.
    m = re.search(r"PS 0 serves its shards as restored from \S+ \(step (\d+)\)", logs[0])
    assert m, logs[0][-3000:]
    print(m.group(0))
    assert "PS 1 serves its shards as restored" not in logs[1], logs[1][-3000:]
    # Both restarted PS rejoin as backups: PS 1 of PS 0's shards and of its
    # own (now PS 2's), PS 0 of PS 2's shards, whose stream it missed.
    for ps in (0, 1):
        assert "rejoined as a backup" in logs[ps], logs[ps][-3000:]
        print([line for line in logs[ps].splitlines() if "rejoined as a backup" in line][-1])

    # Every shard on 2 copies again: each restarted backup caught up with
    # each stream it follows.
    def caught_up(log, backup):
        return re.search(rf"PS {backup} \(algo-{backup + 1}:\d+\) caught up", log)

    assert caught_up(logs[0], 1), logs[0][-3000:]
    assert caught_up(logs[2], 1) and caught_up(logs[2], 0), logs[2][-3000:]
    rows = done_lines(tmp_path, 3)
    for row in rows:
        assert int(row[0]) == 300, rows
    auc = float(AUC.search(read(os.path.join(tmp_path, "worker_0.log"))).group(1))
    print(f"eval AUC after losing two PS {auc:.4f}")
    assert auc > 0.72


def export_checkpoint(ckpt, out):
    """The latest checkpoint under `ckpt` as .npy files (psctl export)."""
    run = subprocess.run(
        [
            os.path.join(ROOT, "tools/psctl/psctl"),
            f"--checkpoint_uri={ckpt}",
            f"--out={out}",
            "export",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    files = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name), "rb") as f:
            files[name] = f.read()
    # The checkpoint's name holds the time it was taken.
    index = json.loads(files["index.json"])
    index.pop("checkpoint")
    files["index.json"] = json.dumps(index, sort_keys=True).encode()
    return files


@needs_netns
def test_replicated_sync_training_survives_a_killed_ps(data, tmp_path):
    """--replicas=2, --mode=sync on 3 hosts: each PS in turn (PS 0 too,
    which holds the catalog and coordinates checkpoints) killed with
    SIGKILL mid training, in a run of its own. Its step barrier moves to
    its backup with its shards, starting at the first step it had not
    applied and holding the pushes it held for it (the backup kept them: a
    held push is acknowledged only once the backup has it); every worker
    finishes its steps with no recovery and no lost push, and the
    launcher's restart of the killed PS rejoins as a backup and takes its
    shards and their barrier back mid-training (handback). The final
    parameters equal, bit for bit, those of the same sync run with no
    failure (same data, same order). The same on 2 hosts (the workers
    vote), PS 0 killed, against a 2-host control run."""
    worker_flags = ["--epochs=0", "--max_steps=200", "--mode=sync", "--sync_timeout_secs=60"]
    runs = {}
    for hosts, name, victim, prefix, subnet, port in (
        (3, "control", None, "psrtt10", "10.89.0", 27020),
        (3, "killed_ps0", 0, "psrtt12", "10.91.0", 27060),
        (3, "killed_ps1", 1, "psrtt9", "10.88.0", 27000),
        (3, "killed_ps2", 2, "psrtt13", "10.92.0", 27080),
        (2, "control_2h", None, "psrtt16", "10.95.0", 27140),
        (2, "killed_ps0_2h", 0, "psrtt17", "10.96.0", 27160),
    ):
        logs = os.path.join(tmp_path, name)
        os.makedirs(logs)
        proc = launch_replicated(
            logs,
            data,
            prefix,
            subnet,
            port,
            [f"--ps_flag=--checkpoint_uri={logs}/ckpt"],
            worker_flags,
            hosts=hosts,
        )
        if victim is not None:
            wait_for(os.path.join(logs, "worker_0.log"), r"step=60 ")
            os.kill(ps_pid(victim, port), signal.SIGKILL)
        finish(proc)
        rows = done_lines(logs, hosts)
        recoveries, lost = [int(r[4]) for r in rows], [int(r[5]) for r in rows]
        print(f"{name}: recoveries {recoveries}, lost pushes {lost}")
        assert_finished_losing_nothing(logs, rows, 200)
        runs[name] = export_checkpoint(f"{logs}/ckpt", os.path.join(tmp_path, f"{name}_export"))
        if victim is None:
            continue
        backup = (victim + 1) % hosts
        ps_logs = [read(os.path.join(logs, f"ps_{ps}.log")) for ps in range(hosts)]
        assert "took over" in ps_logs[backup], ps_logs[backup][-3000:]
        m = re.search(
            rf"sync barrier of PS {victim}'s shards resumed here at step (\d+) with (\d+)",
            ps_logs[backup],
        )
        assert m, ps_logs[backup][-3000:]
        print(m.group(0))
        assert "rejoined as a backup" in ps_logs[victim], ps_logs[victim][-3000:]
        # ... and took its shards back mid-training, its barrier with them.
        m = re.search(
            rf"sync barrier of PS {victim}'s shards resumed here at step (\d+) with (\d+)",
            ps_logs[victim],
        )
        assert m and "shard(s) again" in ps_logs[victim], ps_logs[victim][-3000:]
        print(f"handback: {m.group(0)}")
        # Bit for bit: every exported variable (and index.json: names,
        # shapes, rows, step).
        control, failover = runs["control" if hosts == 3 else "control_2h"], runs[name]
        assert sorted(control) == sorted(failover)
        assert len(control) > 9, sorted(control)  # the 9 variables and the index
        differ = [f for f in control if control[f] != failover[f]]
        assert not differ, (name, differ)
        print(f"{name}: {len(control)} exported files identical to the control run's")
        auc = float(AUC.search(read(os.path.join(logs, "worker_0.log"))).group(1))
        print(f"{name}: eval AUC {auc:.4f}")
        assert auc > 0.72


@needs_netns
def test_replicated_ssp_training_survives_a_killed_ps(data, tmp_path):
    """--replicas=2, --mode=ssp on 3 hosts: PS 1 killed with SIGKILL mid
    training. The backup that takes its shards over also takes the
    workers' clocks on them (each forwarded SSP push carries its worker and
    step), so pulls of those shards go on waiting only for workers that are
    really behind; every worker finishes with no recovery and no lost push."""
    port = 27040
    proc = launch_replicated(
        tmp_path,
        data,
        "psrtt11",
        "10.90.0",
        port,
        [],
        ["--epochs=0", "--max_steps=200", "--mode=ssp", "--staleness=2"],
    )
    kill_ps_at_step(tmp_path, port, 60)
    finish(proc)
    ps2 = read(os.path.join(tmp_path, "ps_2.log"))
    assert "took over" in ps2, ps2[-3000:]
    m = re.search(r"ssp clocks of PS 1's shards resumed here: steps pushed per worker .*", ps2)
    assert m, ps2[-3000:]
    print(m.group(0))
    clocks = [int(c) for c in m.group(0).rsplit("worker ", 1)[1].split(", ")]
    assert len(clocks) == 3 and min(clocks) >= 55, clocks  # killed after step 60
    rows = done_lines(tmp_path, 3)
    print(f"recoveries {[int(r[4]) for r in rows]}, lost pushes {[int(r[5]) for r in rows]}")
    assert_finished_losing_nothing(tmp_path, rows, 200)
    auc = float(AUC.search(read(os.path.join(tmp_path, "worker_0.log"))).group(1))
    print(f"eval AUC after the failover {auc:.4f}")
    assert auc > 0.72
