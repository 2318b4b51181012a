#!/usr/bin/python3
"""SageMaker training-container entry point: one ps_server and one ps_worker
on this host, as SageMaker's `parameter_server` distribution lays them out.

SageMaker starts the container on every host with `train` as its argument;
this script then
  1. reads the hosts (SM_HOSTS / SM_CURRENT_HOST, else
     /opt/ml/input/config/resourceconfig.json), the hyperparameters
     (/opt/ml/input/config/hyperparameters.json) and the channels
     (SM_CHANNEL_<NAME>, or /opt/ml/input/data/<name>; Pipe mode from
     inputdataconfig.json: FIFOs <name>_<epoch>);
  2. builds TF_CONFIG (ps = every host's :2223, worker = every host's :2222,
     as SageMaker's TensorFlow toolkit lays them out;
     this host is ps i and worker i, i = its position in the host list;
     worker 0 on algo-1 is the chief);
  3. starts ps_server (checkpoints to hyperparameter checkpoint_uri, else
     /opt/ml/checkpoints -- which SageMaker syncs with checkpoint_s3_uri --
     restoring the latest one there) and ps_worker (every other
     hyperparameter becomes a flag: {"model": "deepfm"} -> --model=deepfm;
     ps_<flag> keys go to ps_server as --<flag>);
  4. supervises them: a ps_server that dies is started again (it restores
     its shards from the latest checkpoint; async workers wait for it), a
     worker killed by a signal is started again (it rejoins at the
     servers' step), each up to hyperparameter `restarts` (default 3) times;
  5. ends training the way a parameter-server job must: a host whose worker
     is done keeps its ps_server up; the chief waits for every worker (each
     entry point answers on :2224 with its worker's state), then stops its
     ps_server, which takes the final checkpoint of all shards; the other
     hosts stop theirs once the chief's entry point is gone. SIGTERM (a
     stopped job) is forwarded to both processes.

Exit status: 0 on success; the worker's status if it failed (its last lines
go to /opt/ml/output/failure, which SageMaker shows as the failure reason);
143 after SIGTERM. The chief writes /opt/ml/model/psrt_model.json (model,
final metrics, checkpoint location). PSRT_SM_ROOT replaces /opt/ml and
PSRT_BIN_DIR says where the binaries are (tests, local runs).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

PS_PORT, WORKER_PORT, STATUS_PORT = 2223, 2222, 2224
# Hyperparameters that configure this script, not ps_worker.
OWN_KEYS = {"checkpoint_uri", "wait_for_workers_secs", "train_channel", "eval_channel", "restarts"}
# Hyperparameters SageMaker's framework estimators add on their own
# (sagemaker_program, sagemaker_submit_directory, sagemaker_region, ...;
# TensorFlow's estimator adds model_dir): not psrt flags, so not passed on.
FRAMEWORK_PREFIX = "sagemaker_"
FRAMEWORK_KEYS = {"model_dir"}


def log(message):
    print(f"psrt-sagemaker: {message}", flush=True)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default


def hyperparameter_value(value):
    """SageMaker's SDK stores every value as a JSON-encoded string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def find_binary(name):
    bin_dir = os.environ.get("PSRT_BIN_DIR", "/opt/psrt/bin")
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (
        os.path.join(bin_dir, name, name),
        os.path.join(bin_dir, "tools", name, name),
        os.path.join(bin_dir, name),
        os.path.join(here, "..", "..", "bazel-bin", name, name),
        os.path.join(here, "..", "..", "bazel-bin", "tools", name, name),
        shutil.which(name) or "",
    ):
        if path and os.access(path, os.X_OK):
            return os.path.abspath(path)
    raise SystemExit(f"psrt-sagemaker: cannot find {name} (set PSRT_BIN_DIR)")


class Config:
    def __init__(self, root):
        self.root = root
        config = os.path.join(root, "input", "config")
        resource = read_json(os.path.join(config, "resourceconfig.json"), {})
        hosts = os.environ.get("SM_HOSTS")
        self.hosts = json.loads(hosts) if hosts else resource.get("hosts")
        self.current = os.environ.get("SM_CURRENT_HOST") or resource.get("current_host")
        if not self.hosts or not self.current:
            raise SystemExit(
                "psrt-sagemaker: no host list: set SM_HOSTS and SM_CURRENT_HOST "
                f"or provide {config}/resourceconfig.json"
            )
        # algo-1, algo-2, ..., algo-10 (numerically), the same on every host.
        self.hosts = sorted(
            self.hosts, key=lambda h: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", h)]
        )
        if self.current not in self.hosts:
            raise SystemExit(
                f"psrt-sagemaker: current host {self.current} is not in " f"{self.hosts}"
            )
        self.index = self.hosts.index(self.current)
        self.chief = self.index == 0
        raw = read_json(os.path.join(config, "hyperparameters.json"), {})
        self.hyperparameters = {k: hyperparameter_value(v) for k, v in raw.items()}
        channels = read_json(os.path.join(config, "inputdataconfig.json"), {})
        self.input_modes = {
            name: spec.get("TrainingInputMode", "File") for name, spec in channels.items()
        }
        # ShardedByS3Key: SageMaker already gave each host its own objects.
        self.distribution = {
            name: spec.get("S3DistributionType", "FullyReplicated")
            for name, spec in channels.items()
        }
        self.model_dir = os.environ.get("SM_MODEL_DIR", os.path.join(root, "model"))
        self.output_dir = os.path.join(root, "output")

    def channel_files(self, name):
        """ps_worker's file pattern for channel `name`, or None if absent."""
        data = os.path.join(self.root, "input", "data")
        if self.input_modes.get(name) == "Pipe":
            return os.path.join(data, f"{name}_{{epoch}}")
        path = os.environ.get(f"SM_CHANNEL_{name.upper()}", os.path.join(data, name))
        if not os.path.isdir(path):
            return None
        return os.path.join(path, "*")

    def tf_config(self, role):
        cluster = {
            "ps": [f"{h}:{PS_PORT}" for h in self.hosts],
            "worker": [f"{h}:{WORKER_PORT}" for h in self.hosts],
        }
        return json.dumps({"cluster": cluster, "task": {"type": role, "index": self.index}})


class WorkerState:
    """This host's worker state, served on STATUS_PORT as JSON."""

    def __init__(self):
        self.lock = threading.Lock()
        self.state = {"worker": "running", "finished": False}

    def set(self, **kv):
        with self.lock:
            self.state.update(kv)

    def get(self):
        with self.lock:
            return dict(self.state)

    def serve(self):
        state = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps(state.get()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = HTTPServer(("0.0.0.0", STATUS_PORT), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def peer_state(host, timeout=2.0):
    """A host's entry-point state, or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{STATUS_PORT}/", timeout=timeout) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def stream(proc, prefix, tail):
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        tail.append(line)
        del tail[:-50]
        sys.stdout.write(f"[{prefix}] {line}")
        sys.stdout.flush()


def plan(cfg):
    """What this host runs: the flags of its ps_server and ps_worker (from
    the channels and hyperparameters) and the checkpoint location."""
    root = cfg.root
    hp = dict(cfg.hyperparameters)
    train = cfg.channel_files(hp.get("train_channel", "train"))
    if train is None:
        raise SystemExit(
            "psrt-sagemaker: no training channel (SM_CHANNEL_TRAIN or " f"{root}/input/data/train)"
        )
    eval_files = None
    for name in (
        [hp.get("eval_channel")] if hp.get("eval_channel") else ["eval", "test", "validation"]
    ):
        eval_files = cfg.channel_files(name)
        if eval_files:
            break
    checkpoint_uri = hp.get("checkpoint_uri") or os.path.join(root, "checkpoints")
    # /opt/ml/checkpoints is each host's own disk: PS 0 sends every PS the
    # manifest, so a PS restarted on its host restores from its own files.
    per_host = not hp.get("checkpoint_uri")
    ps_flags = [
        f"--checkpoint_uri={checkpoint_uri}",
        "--restore=auto",
        f"--checkpoint_storage_per_host={'true' if per_host else 'false'}",
    ]
    worker_flags = [f"--train_files={train}"]
    train_channel = hp.get("train_channel", "train")
    if "data_sharding" not in hp and cfg.distribution.get(train_channel) == "ShardedByS3Key":
        # Each host's channel holds only its share: splitting it again over
        # the workers would train each worker on 1/N of 1/N.
        worker_flags.append("--data_sharding=none")
        log(
            f"channel {train_channel} is ShardedByS3Key: "
            "each worker trains on all of its host's share"
        )
    if eval_files:
        worker_flags.append(f"--eval_files={eval_files}")
    framework = sorted(k for k in hp if k.startswith(FRAMEWORK_PREFIX) or k in FRAMEWORK_KEYS)
    if framework:
        log(
            f"ignoring the estimator's own hyperparameters {', '.join(framework)} "
            "(psrt writes the model to SM_MODEL_DIR and checkpoints to checkpoint_uri)"
        )
    for key, value in hp.items():
        if key in OWN_KEYS or key in framework:
            continue
        if key.startswith("ps_"):
            ps_flags.append(f"--{key[3:]}={value}")
        else:
            worker_flags.append(f"--{key}={value}")
    log(
        f"host {cfg.current} ({cfg.index + 1} of {len(cfg.hosts)}"
        f"{', chief' if cfg.chief else ''}); train {train}; eval {eval_files}; "
        f"checkpoints {checkpoint_uri}"
    )
    return ps_flags, worker_flags, checkpoint_uri


class Supervisor:
    """Runs this host's ps_server and ps_worker with TF_CONFIG set, streams
    their output, restarts either when it dies (up to `restarts` times), and
    forwards SIGTERM to both."""

    def __init__(self, cfg, ps_argv, worker_argv, restarts):
        self.cfg, self.ps_argv, self.worker_argv = cfg, ps_argv, worker_argv
        self.restarts = restarts
        self.terminated = threading.Event()
        self.procs = {}
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigterm)

    def _on_sigterm(self, signum, frame):
        log("SIGTERM: stopping ps_worker and ps_server (the servers checkpoint first)")
        self.terminated.set()
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    def _start(self, role, argv):
        env = dict(os.environ, TF_CONFIG=self.cfg.tf_config(role))
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        tail = []
        thread = threading.Thread(target=stream, args=(proc, role, tail), daemon=True)
        thread.start()
        self.procs[role] = proc
        return proc, tail, thread

    def run_worker(self):
        """Until the worker ends for good; returns its exit status. The PS
        keeps running (self.ps)."""
        restarts = self.restarts
        self.ps, self.ps_tail, self.ps_thread = self._start("ps", self.ps_argv)
        worker, self.worker_tail, worker_thread = self._start("worker", self.worker_argv)
        ps_restarts = worker_restarts = 0
        while True:
            code = worker.poll()
            if code is not None:
                worker_thread.join(timeout=5)
                if code < 0 and not self.terminated.is_set() and worker_restarts < restarts:
                    worker_restarts += 1
                    log(
                        f"ps_worker killed (status {code}); restarting it "
                        f"({worker_restarts} of {restarts})"
                    )
                    worker, self.worker_tail, worker_thread = self._start(
                        "worker", self.worker_argv
                    )
                    continue
                return code
            if self.ps.poll() is not None and not self.terminated.is_set():
                self.ps_thread.join(timeout=5)
                if ps_restarts >= restarts:
                    log(
                        f"ps_server exited (status {self.ps.returncode}) {restarts} times; "
                        "stopping the worker"
                    )
                    worker.send_signal(signal.SIGTERM)
                    return worker.wait()
                ps_restarts += 1
                log(
                    f"ps_server exited (status {self.ps.returncode}); restarting it "
                    f"({ps_restarts} of {restarts}); it restores the latest checkpoint"
                )
                self.ps, self.ps_tail, self.ps_thread = self._start("ps", self.ps_argv)
            time.sleep(0.2)

    def stop_ps(self):
        """SIGTERM to the PS (it takes or waits for the final checkpoint);
        returns its exit status."""
        if self.ps.poll() is None:
            self.ps.send_signal(signal.SIGTERM)
        ps_code = self.ps.wait()
        self.ps_thread.join(timeout=5)
        if ps_code not in (0, -signal.SIGTERM):
            log(f"ps_server exited with status {ps_code}")
        return ps_code


def wait_for_peers(cfg, wait_for_workers, terminated):
    """After this host's worker succeeded: the chief waits for every other
    host's worker (they still push to every PS); the others keep their PS
    serving until the chief has finished (it takes the final checkpoint
    through every PS) or has been gone for 30 s."""
    if cfg.chief:
        deadline = time.time() + wait_for_workers
        pending = set(cfg.hosts[1:])
        while pending and time.time() < deadline and not terminated.is_set():
            for host in list(pending):
                s = peer_state(host)
                if s is not None and s.get("worker") != "running":
                    log(f"{host}: worker {s['worker']}")
                    pending.discard(host)
            time.sleep(1)
        if pending:
            log(
                f"workers on {sorted(pending)} still running after "
                f"{wait_for_workers:.0f} s; stopping anyway"
            )
        return
    chief, silent = cfg.hosts[0], 0
    while silent < 30 and not terminated.is_set():
        s = peer_state(chief)
        if s is not None and s.get("finished"):
            break
        silent = silent + 1 if s is None else 0
        time.sleep(1)
    log(f"chief {chief} {'gone' if silent >= 30 else 'finished'}; stopping ps_server")


def write_model_pointer(cfg, checkpoint_uri, worker_tail):
    """The chief's SM_MODEL_DIR/psrt_model.json: the run's hyperparameters,
    hosts, checkpoint location and final evaluation."""
    metrics = {}
    for line in worker_tail:
        m = re.search(r"final (.*)", line)
        if m:
            metrics = dict(kv.split("=", 1) for kv in m.group(1).split())
    os.makedirs(cfg.model_dir, exist_ok=True)
    with open(os.path.join(cfg.model_dir, "psrt_model.json"), "w") as f:
        json.dump(
            {
                "hyperparameters": cfg.hyperparameters,
                "hosts": cfg.hosts,
                "checkpoint_uri": checkpoint_uri,
                "final": metrics,
            },
            f,
            indent=1,
        )


def export_model(cfg, checkpoint_uri, per_host):
    """The chief's SM_MODEL_DIR/export: the final checkpoint as numpy files
    (psctl export), loadable without psrt. Needs every PS's shards in one
    place: a shared checkpoint_uri (S3 or EFS); with per-host checkpoints
    the chief holds only its own PS's, so it says so instead."""
    out = os.path.join(cfg.model_dir, "export")
    if per_host and len(cfg.hosts) > 1:
        log(
            "no numpy export in SM_MODEL_DIR: each host checkpointed to its own "
            "disk; set the checkpoint_uri hyperparameter (S3 or EFS) to get one, "
            "or run psctl export on the synced checkpoint_s3_uri"
        )
        return False
    try:
        psctl = find_binary("psctl")
    except SystemExit as missing:  # an image without psctl: training succeeded
        log(f"no numpy export in SM_MODEL_DIR: {missing}")
        return False
    result = subprocess.run(
        [psctl, f"--checkpoint_uri={checkpoint_uri}", f"--out={out}", "export"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log(result.stdout.strip())
    return result.returncode == 0


def write_failure(cfg, program, status, tail):
    """SageMaker shows /opt/ml/output/failure as the job's failure reason."""
    with open(os.path.join(cfg.output_dir, "failure"), "w") as f:
        f.write(f"{program} on {cfg.current} exited with status {status}:\n")
        f.writelines(tail[-20:])


def main():
    cfg = Config(os.environ.get("PSRT_SM_ROOT", "/opt/ml"))
    ps_flags, worker_flags, checkpoint_uri = plan(cfg)
    hp = cfg.hyperparameters
    wait_for_workers = float(hp.get("wait_for_workers_secs", 3600))
    os.makedirs(cfg.output_dir, exist_ok=True)
    if not checkpoint_uri.startswith("s3://"):
        os.makedirs(checkpoint_uri, exist_ok=True)

    state = WorkerState()
    status_server = state.serve()
    supervisor = Supervisor(
        cfg,
        [find_binary("ps_server")] + ps_flags,
        [find_binary("ps_worker")] + worker_flags,
        int(hp.get("restarts", 3)),
    )
    code = supervisor.run_worker()
    state.set(worker="succeeded" if code == 0 else "failed", exit_status=code)
    log(f"ps_worker exited with status {code}")
    terminated = supervisor.terminated
    if code == 0 and not terminated.is_set():
        wait_for_peers(cfg, wait_for_workers, terminated)
    ps_code = supervisor.stop_ps()
    if code == 0 and cfg.chief:
        write_model_pointer(cfg, checkpoint_uri, supervisor.worker_tail)
        if ps_code in (0, -signal.SIGTERM):
            export_model(cfg, checkpoint_uri, per_host=not hp.get("checkpoint_uri"))
    state.set(finished=True)
    if cfg.chief and len(cfg.hosts) > 1:
        time.sleep(3)  # let the others see "finished" before the port closes
    status_server.shutdown()

    if terminated.is_set():
        return 143
    if code != 0:
        write_failure(cfg, "ps_worker", code, supervisor.worker_tail)
        return code if code > 0 else 1
    if ps_code not in (0, -signal.SIGTERM):
        write_failure(cfg, "ps_server", ps_code, supervisor.ps_tail)
        return 1
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
