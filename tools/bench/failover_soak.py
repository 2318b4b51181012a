#!/usr/bin/python3
"""Exactly-once through a PS kill, many times over, and what the kill
costs the model: the soak behind tests/netns/test_hosts.py's
bounded-tables test, which runs each case once.

    bazel build //tests/netns:netns_replicated_test
    /usr/bin/python3 tools/bench/failover_soak.py [--rounds=50]

Each round runs two trainings of DeepFM on 2 hosts (network namespaces,
deploy/local/launch.py --netns; root), --replicas=2, hash tables bounded
as in that test (admission min_count 2, the SSD tier, --memory_budget_mb
48), 300 steps of 256 on each of 2 workers, interleaved:

  - control: nothing happens;
  - kill: PS 1 is SIGKILLed once worker 0 logged step 160; the launcher
    restarts it, PS 0 takes its shards over, the new PS 1 rejoins and
    takes them back.

After each run `psctl variables` reads every shard copy's version (the
pushes it applied): each must be exactly 600, the pushes the workers
made (short: one lost; past it: one applied twice). Every run must
finish with no PS recovery and no lost push. Prints each run's held-out
AUC and, at the end, each arm's AUC range and mean. Logs of a run that
fails a check are kept under --keep (default out/bench/failover_soak).
Exit status 1 if any run failed a check. About 8 s a run on the 2-vCPU
VM.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNFILES = os.path.join(ROOT, "bazel-bin/tests/netns/netns_replicated_test.runfiles")
os.environ.setdefault("TEST_SRCDIR", RUNFILES)
sys.path.insert(0, os.path.join(RUNFILES, "psrt/tests/netns"))

import netns_util  # noqa: E402
import test_hosts  # noqa: E402

STEPS, WORKERS, PORT = 300, 2, 27240


def one_run(data, logs, kill):
    """One training; returns (auc, problems)."""
    proc = test_hosts.launch(
        logs,
        data,
        2,
        [
            "--netns=psrts1",
            "--netns_subnet=10.111.0",
            f"--base_port={PORT}",
            "--restart_ps=1",
            "--ps_flag=--replicas=2",
            "--ps_flag=--memory_budget_mb=48",
            f"--then={test_hosts.PSCTL} replicas && {test_hosts.PSCTL} variables",
        ],
        test_hosts.BOUNDED_TABLE_FLAGS,
    )
    problems = []
    try:
        if kill:
            test_hosts.kill_ps_at_step(logs, PORT, 160)
        out, _ = proc.communicate(timeout=600)
    except Exception as e:  # a hung run is a failed check, not the end
        netns_util.stop(proc)
        return 0.0, [f"did not finish: {e!r}"]
    if proc.returncode != 0:
        problems.append(f"launcher exited {proc.returncode}")
    # The netns test's own checks: each push applied once on every copy,
    # and every worker done with no recovery and no lost push.
    checks = (
        lambda: test_hosts.assert_each_push_applied_once(out, STEPS * WORKERS, 22),
        lambda: test_hosts.assert_finished_losing_nothing(
            logs, test_hosts.done_lines(logs, WORKERS), STEPS
        ),
    )
    for check in checks:
        try:
            check()
        except AssertionError as e:
            problems.append(str(e)[-1000:])
    found = netns_util.AUC.search(netns_util.read(os.path.join(logs, "worker_0.log")))
    return (float(found.group(1)) if found else 0.0), problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--keep", default=os.path.join(ROOT, "out/bench/failover_soak"))
    args = parser.parse_args()
    if not os.path.isdir(RUNFILES):
        sys.exit(f"{RUNFILES} is missing: bazel build //tests/netns:netns_replicated_test")
    work = tempfile.mkdtemp(prefix="failover_soak.")
    data = netns_util.make_training_data(os.path.join(work, "data"))
    aucs = {"control": [], "kill": []}
    failed = 0
    for r in range(args.rounds):
        for arm in ("control", "kill"):
            logs = os.path.join(work, "run")
            shutil.rmtree(logs, ignore_errors=True)
            os.makedirs(logs)
            start = time.time()
            auc, problems = one_run(data, logs, arm == "kill")
            aucs[arm].append(auc)
            print(
                f"round {r + 1}/{args.rounds} {arm}: AUC {auc:.4f}, "
                f"{time.time() - start:.0f} s{'; ' + '; '.join(problems) if problems else ''}",
                flush=True,
            )
            if problems:
                failed += 1
                kept = os.path.join(args.keep, f"round{r + 1}_{arm}")
                shutil.rmtree(kept, ignore_errors=True)
                shutil.copytree(logs, kept)
                print(f"  logs kept in {kept}", flush=True)
    for arm, values in aucs.items():
        print(
            f"{arm}: {len(values)} runs, AUC {min(values):.4f}-{max(values):.4f}, "
            f"mean {statistics.mean(values):.4f}"
        )
    shutil.rmtree(work, ignore_errors=True)
    print(f"{failed} run(s) failed a check")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
