"""deploy/local/launch.py removes the shared-memory region files a process
killed with SIGKILL left (a ps_server serving shm, as when it restarts
one), and never those of a live process."""
import glob
import importlib.util
import os
import time

spec = importlib.util.spec_from_file_location("launch", "deploy/local/launch.py")
launch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(launch)


def regions(pid):
    return glob.glob(f"/dev/shm/{pid}:{os.getuid()}:*")


def wait_for_regions(pid):
    deadline = time.time() + 10
    while not regions(pid) and time.time() < deadline:
        time.sleep(0.05)
    return regions(pid)


def test_a_killed_ps_regions_are_removed_and_a_live_ones_kept(make_cluster):
    flags = ["--data_plane_providers=shm,tcp"]
    killed, live = make_cluster(1, flags), make_cluster(1, flags)
    killed_pid, live_pid = killed.procs[0].pid, live.procs[0].pid
    assert wait_for_regions(killed_pid), killed.log_tails()
    live_regions = wait_for_regions(live_pid)
    assert live_regions, live.log_tails()
    assert launch.remove_stale_shm_regions(live_pid) == 0
    assert regions(live_pid) == live_regions
    killed.kill(0)
    left = regions(killed_pid)
    assert left  # what SIGKILL leaves behind
    assert launch.remove_stale_shm_regions(killed_pid) == len(left)
    assert regions(killed_pid) == []
    # The live PS still serves over shm.
    with live.client(data_plane_providers="shm,tcp") as client:
        client.wait_for_servers(10)
    assert regions(live_pid) == live_regions
