#!/usr/bin/python3
"""Starts a psrt cluster on one machine: N "hosts", each with one ps_server
and (optionally) one worker process, as SageMaker's parameter_server layout
puts them; every process gets its own ports and TF_CONFIG.

    deploy/local/launch.py --hosts=2 -- bazel-bin/tools/ps_bench/ps_bench
    deploy/local/launch.py --hosts=2 --workers=0          # servers only
    deploy/local/launch.py --hosts=2 --restart_ps=3 \
        --ps_flag=--checkpoint_uri=out/ckpt --ps_flag=--checkpoint_every_secs=60 -- ...
    deploy/local/launch.py --hosts=3 --netns=psrt -- ...   # 3 namespaces (root)

The worker command runs once per worker with TF_CONFIG set ({"task":
{"type": "worker", "index": i}}) and "{index}" in its arguments replaced by
i. Logs go to --logs/<role>_<index>.log; worker output is also echoed with a
prefix. Without --netns host i is the loopback address 127.0.0.<i+1> (its
ps_server binds only that address; no root needed), every process on its
own ports. With --ps_flag=--replicas=2 (2 hosts or more) a ps_server that dies
is replaced by its backup and the job goes on without it (with
--restart_ps=N it is started again and rejoins as a backup). With
--restart_ps=N a ps_server that dies is started again (up to N
times) with --restore=auto, so it reloads its shards from the latest
checkpoint while the workers wait for it; --restart_workers=N does the same
for workers (a restarted async worker rejoins at the servers' step). With
--netns=PREFIX every host is a network namespace of its own (deploy/local/
netns.py: addresses 10.77.0.<i> on a bridge, host names algo-1..algo-N, the
same ports on every host), created at start and removed at the end; host i
runs ps_server i and worker i (worker j on host j % hosts). When every
worker has exited the servers get SIGTERM; with --then=CMD, once every
worker succeeded, CMD runs first (a shell command on host 1, TF_CONFIG
naming the cluster: `--then="psctl replicas"` checks the copies before the
servers stop; its failure fails the launch). Ctrl-C or
SIGTERM stops everything cleanly. Exit status: 0 if every process succeeded,
1 if any failed (its log tail is printed), 2 on bad usage.
"""
import argparse
import fcntl
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def pick_ports(base, count):
    ports, port = [], base
    while len(ports) < count:
        if port_free(port):
            ports.append(port)
        port += 1
    return ports


def tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def remove_stale_shm_regions(pid):
    """libfabric's shm keeps each endpoint's region in
    /dev/shm/<pid>:<uid>:<n> (about 4 MiB of memory) and unlinks it when the
    endpoint closes: a process killed with SIGKILL leaves its own until a
    process given its pid starts. Called for a process once it was reaped:
    removes its files that no live psrt endpoint holds (each holds a shared
    flock on its region; dataplane/shm_regions.h). Returns how many."""
    removed = 0
    for path in glob.glob(f"/dev/shm/{pid}:{os.getuid()}:*"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(path)
            removed += 1
        except OSError:
            pass  # held by a live endpoint, or gone meanwhile
        finally:
            os.close(fd)
    return removed


class Process:
    def __init__(self, role, index, argv, env, log_dir, echo, append=False):
        self.role, self.index = role, index
        self.argv, self.env, self.echo = argv, env, echo
        self.restarts = 0
        self.name = f"{role}{index}"
        self.log = os.path.join(log_dir, f"{role}_{index}.log")
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.thread = threading.Thread(target=self._pump, args=(echo, append), daemon=True)
        self.thread.start()

    def _pump(self, echo, append):
        with open(self.log, "a" if append else "w") as log:
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace")
                log.write(line)
                log.flush()
                if echo:
                    sys.stdout.write(f"[{self.name}] {line}")
                    sys.stdout.flush()

    def restarted(self, argv, log_dir):
        """The same process started again (its log appended to), once this
        one was reaped."""
        self.thread.join(timeout=5)
        remove_stale_shm_regions(self.proc.pid)
        again = Process(self.role, self.index, argv, self.env, log_dir, self.echo, append=True)
        again.restarts = self.restarts + 1
        return again

    def signal(self, sig):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


def loopback_host(i):
    """Host i's address without namespaces: 127.0.0.1, 127.0.0.2, ..."""
    if not 0 <= i < 254:
        raise SystemExit("launch: at most 254 hosts without --netns")
    return f"127.0.0.{i + 1}"


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("--hosts", type=int, default=2, help="ps_server count")
    parser.add_argument(
        "--workers", type=int, default=None, help="worker count (default: one per host)"
    )
    parser.add_argument("--base_port", type=int, default=2223)
    parser.add_argument("--logs", default=os.path.join(ROOT, "out", "logs"))
    parser.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    parser.add_argument(
        "--ps_flag", action="append", default=[], help="extra ps_server flag (repeatable)"
    )
    parser.add_argument("--stop_grace_secs", type=float, default=30)
    parser.add_argument(
        "--restart_ps",
        type=int,
        default=0,
        help="restart a ps_server that dies, up to N times each, "
        "with --restore=auto if it has a --ps_flag=--checkpoint_uri=... "
        "(else empty: with --replicas it rejoins as a backup)",
    )
    parser.add_argument(
        "--restart_workers",
        type=int,
        default=0,
        help="restart a worker that dies (killed, or a non-zero exit), " "up to N times each",
    )
    parser.add_argument(
        "--netns",
        default="",
        help="run each host in its own network namespace named "
        "PREFIX-h<i> (needs root and iproute2)",
    )
    parser.add_argument(
        "--netns_subnet", default="10.77.0", help="first three octets of the hosts' addresses"
    )
    parser.add_argument(
        "--then",
        default="",
        help="shell command run on host 1 (TF_CONFIG naming the cluster) once "
        "every worker succeeded, before the servers stop; a non-zero exit "
        "fails the launch",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- worker command and arguments")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    workers = args.hosts if args.workers is None else args.workers
    if args.hosts < 1 or workers < 0 or (workers > 0 and not command):
        parser.error("need --hosts >= 1 and a worker command after -- " "(or --workers=0)")
    server = os.path.join(args.bin_dir, "ps_server", "ps_server")
    if not os.access(server, os.X_OK):
        parser.error(f"{server} not found; build it: bazel build //ps_server")
    os.makedirs(args.logs, exist_ok=True)

    network = None
    if args.netns:
        import netns

        why = netns.available()
        if why:
            parser.error(f"--netns: {why}")
        network = netns.HostNetwork(args.netns, args.hosts, args.netns_subnet)
        network.create()
        ps_ports = [args.base_port] * args.hosts
        metrics_ports = [args.base_port + 1] * args.hosts
        cluster = {
            "ps": [f"{network.hostname(i)}:{args.base_port}" for i in range(args.hosts)],
            "worker": [
                f"{network.hostname(j % args.hosts)}:{args.base_port + 2}" for j in range(workers)
            ],
        }
        print(
            f"launch: {args.hosts} hosts in network namespaces {args.netns}-h1.."
            f"{args.netns}-h{args.hosts} ({args.netns_subnet}.1..), ps_servers at "
            f"{cluster['ps']}, {workers} worker(s); logs in {args.logs}",
            flush=True,
        )
    else:
        ports = pick_ports(args.base_port, 2 * args.hosts + max(workers, 1))
        ps_ports = ports[: args.hosts]
        metrics_ports = ports[args.hosts : 2 * args.hosts]
        worker_ports = ports[2 * args.hosts : 2 * args.hosts + workers]
        # Host i is 127.0.0.<i+1> (Linux routes all of 127/8 to loopback, no
        # root needed): each ps_server binds its host's address only, so
        # hosts differ as --replicas needs them to. (Addresses, not
        # localhost: c-ares leaks its "localhost" lookup at exit, which
        # LeakSanitizer reports in the ASan builds.)
        addresses = [loopback_host(i) for i in range(args.hosts)]
        cluster = {
            "ps": [f"{addresses[i]}:{p}" for i, p in enumerate(ps_ports)],
            "worker": [f"{addresses[j % args.hosts]}:{p}" for j, p in enumerate(worker_ports)],
        }
        print(
            f"launch: {args.hosts} host(s) on loopback addresses "
            f"{addresses[0]}..{addresses[-1]}, ps_servers at {cluster['ps']} "
            f"(metrics ports {metrics_ports}), {workers} worker(s); logs in {args.logs}",
            flush=True,
        )
    try:
        return supervise(args, command, workers, server, cluster, ps_ports, metrics_ports, network)
    finally:
        if network is not None:
            network.destroy()


def supervise(args, command, workers, server, cluster, ps_ports, metrics_ports, network):
    def on_host(i):
        return network.exec_prefix(i) if network is not None else []

    stopping = threading.Event()

    def on_signal(signum, frame):
        print(f"launch: {signal.Signals(signum).name}: stopping everything", flush=True)
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def tf_config(role, index):
        return json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})

    servers = []
    for i in range(args.hosts):
        env = dict(os.environ, TF_CONFIG=tf_config("ps", i))
        argv = on_host(i) + [server, f"--metrics_port={metrics_ports[i]}"]
        if network is None:
            address = loopback_host(i)
            argv += [f"--bind_address={address}", f"--metrics_bind_address={address}"]
        servers.append(Process("ps", i, argv + args.ps_flag, env, args.logs, echo=False))
    workers_procs = []
    for i in range(workers):
        env = dict(os.environ, TF_CONFIG=tf_config("worker", i), PSRT_WORKER_INDEX=str(i))
        argv = on_host(i % args.hosts) + [a.replace("{index}", str(i)) for a in command]
        workers_procs.append(Process("worker", i, argv, env, args.logs, echo=True))

    # In sync and SSP modes, and with all-reduced dense layers, the other
    # workers wait for a dead one and then fail naming it
    # (--sync_timeout_secs): let them say so rather than stopping
    # everything the moment one worker dies.
    stepped = any(
        m in a for a in command for m in ("--mode=sync", "--mode=ssp", "--dense_sync=allreduce")
    )
    # With --replicas > 1 a PS that dies is replaced by its backup: the job
    # goes on without it (docs/operations.md, Replicas).
    replicated = any(a.startswith("--replicas=") and a != "--replicas=1" for a in args.ps_flag)
    failed = []
    while not stopping.is_set():
        for i, p in enumerate(servers):
            code = p.proc.poll()
            if code is None:
                continue
            if p.restarts < args.restart_ps:
                # With replicas its backup serves its shards already and,
                # started again, it rejoins as a backup with copies from the
                # other PS; --restore=auto still, since if its backup died
                # too the checkpoint is what is left of its shards.
                # (Without a --checkpoint_uri there is nothing to restore:
                # it starts empty, and only its replicas hold its shards.)
                argv = [a for a in p.argv if not a.startswith("--restore=")]
                restore = any(a.startswith("--checkpoint_uri=") for a in argv)
                why = "; with replicas its backup takes its shards over" if replicated else ""
                how = "with --restore=auto" if restore else "empty (no --checkpoint_uri)"
                print(
                    f"launch: {p.name} exited (status {code}){why}; restarting it "
                    f"({p.restarts + 1} of {args.restart_ps}) {how}"
                    + (" to rejoin as a backup" if replicated else ""),
                    flush=True,
                )
                servers[i] = p.restarted(argv + (["--restore=auto"] if restore else []), args.logs)
                continue
            if replicated:
                if p not in failed:
                    print(
                        f"launch: {p.name} exited (status {code}); with replicas "
                        "its backup takes its shards over and the job goes on",
                        flush=True,
                    )
                    failed.append(p)
                continue
            failed.append(p)
        for i, p in enumerate(workers_procs):
            code = p.proc.poll()
            if code in (None, 0) or p in failed:
                continue
            if p.restarts < args.restart_workers:
                print(
                    f"launch: {p.name} exited (status {code}); restarting it "
                    f"({p.restarts + 1} of {args.restart_workers})",
                    flush=True,
                )
                workers_procs[i] = p.restarted(p.argv, args.logs)
                continue
            failed.append(p)
            if stepped and any(q.proc.poll() is None for q in workers_procs):
                print(
                    f"launch: {p.name} failed (exit status {code}); the other "
                    "workers run on until they finish or name it as missing "
                    "(--sync_timeout_secs)",
                    flush=True,
                )
        running = [q for q in workers_procs if q.proc.poll() is None]
        lost = [q for q in failed if q.role == "worker" or not replicated]
        if any(q.role == "ps" for q in lost) or (lost and not (stepped and running)):
            break
        if workers_procs and not running:
            break
        time.sleep(0.2)

    then_failed = False
    if (
        args.then
        and not stopping.is_set()
        and workers_procs
        and all(q.proc.poll() == 0 for q in workers_procs)
    ):
        print(f"launch: every worker finished; running --then: {args.then}", flush=True)
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster}))
        then = subprocess.run(
            on_host(0) + ["/bin/sh", "-c", args.then],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        print(then.stdout, end="", flush=True)
        if then.returncode != 0:
            print(f"launch: --then failed (exit status {then.returncode})", flush=True)
            then_failed = True

    for p in workers_procs + servers:
        p.signal(signal.SIGTERM)
    deadline = time.time() + args.stop_grace_secs
    for p in workers_procs + servers:
        while p.proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        if p.proc.poll() is None:
            print(f"launch: {p.name} ignored SIGTERM; killing it", flush=True)
            p.signal(signal.SIGKILL)
            p.proc.wait()
        p.thread.join(timeout=5)
        if p.proc.poll() is not None:
            remove_stale_shm_regions(p.proc.pid)
    for p in servers:
        if p.proc.returncode not in (0, -signal.SIGTERM) and p not in failed:
            failed.append(p)

    replaced = [p for p in failed if p.role == "ps" and replicated and p.proc.returncode != 1]
    for p in failed:
        print(
            f"launch: {p.name} failed (exit status {p.proc.returncode}); "
            f"last lines of {p.log}:\n{tail(p.log)}",
            flush=True,
        )
    if [p for p in failed if p not in replaced] or then_failed:
        return 1
    if replaced:
        print(
            "launch: training finished; "
            + ", ".join(p.name for p in replaced)
            + " died and was replaced by its backup (--replicas)",
            flush=True,
        )
    if stopping.is_set():
        return 130
    print("launch: all processes finished successfully", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
