"""psrt.Client: the Python counterpart of clients/cpp/client.h."""
import concurrent.futures
import json
import numbers
import os
import random
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Union

import grpc
import numpy as np

from . import frame
from . import wire_dtype as wire
from ._proto import ps_pb2, ps_pb2_grpc
from .routing import Routing
from .shard_map import DENSE, ShardMap, normalize
from .worker_info import WorkerInfo, worker_info

# What the client accepts for ids and gradients.
ArrayLike = Union[np.ndarray, Sequence[Any]]

# Largest payload put in one Push message, and the largest Pull response
# message asked for. Larger than the C++ client's 1 MiB: each gRPC message
# costs Python more than it costs C++ (the server accepts up to 16 MiB).
MESSAGE_BYTES = 4 << 20
# Pull responses: the server gathers message k+1 while k is on the wire, so
# smaller messages overlap better (measured: 1 MiB beats 4 MiB).
PULL_MESSAGE_BYTES = int(os.environ.get("PSRT_PULL_MESSAGE_BYTES", 1 << 20))
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE,)


class _PullPiece(NamedTuple):
    """One item of a Pull request and where its values go: `count` floats
    into `out` (a flat float32 array) from `offset`; `ids` None for a dense
    range."""

    item: "ps_pb2.TensorItem"
    ids: Optional[np.ndarray]
    out: np.ndarray
    offset: int
    count: int


class _PushPiece(NamedTuple):
    """One item of a Push request: its ids (None for a dense range) and
    gradient rows."""

    item: "ps_pb2.TensorItem"
    ids: Optional[np.ndarray]
    grads: np.ndarray


class PsError(RuntimeError):
    """A server or transport error: `code` is the grpc.StatusCode, the message
    is the server's, prefixed with the PS that answered."""

    def __init__(self, code, message, ps=None):
        super().__init__(f"{code.name}: {message}" + (f" (PS {ps})" if ps is not None else ""))
        self.code = code
        self.server_message = message
        self.ps = ps


# How long create_variables waits while another process's creation (perhaps
# a long restore) holds PS 0.
CREATION_WAIT_LIMIT_SECS = 30 * 60


class _LostCreationRace(PsError):
    """PS 0 refused to prepare a creation (another is in progress there, or
    the catalog moved); nothing was created anywhere, so it may be retried."""


# Client(mode=...) -> Consistency.Mode.
_MODES = {
    "async": ps_pb2.Consistency.ASYNC,
    "sync": ps_pb2.Consistency.SYNC,
    "ssp": ps_pb2.Consistency.SSP,
}


def load_cluster(cluster=None):
    """PS addresses from a TF_CONFIG-style dict/JSON string/file path, else
    $TF_CONFIG, else one PS on localhost:2223."""
    if cluster is None:
        cluster = os.environ.get("TF_CONFIG") or {"cluster": {"ps": ["localhost:2223"]}}
    if isinstance(cluster, str):
        text = cluster
        if not cluster.lstrip().startswith("{"):
            with open(cluster) as f:
                text = f.read()
        cluster = json.loads(text)
    if isinstance(cluster, (list, tuple)):
        return list(cluster)
    ps = cluster.get("cluster", {}).get("ps")
    if not ps or not all(isinstance(a, str) and ":" in a for a in ps):
        raise ValueError(f"cluster spec needs cluster.ps as a list of host:port, got {ps!r}")
    return list(ps)


def _gradient(name, array, shapes):
    """`array` as a flat float32 array, if it is float32 and has one of
    `shapes` (a list, in the order errors name them); TypeError / ValueError naming the variable
    otherwise. Nothing
    is converted silently: a float64 gradient is a TypeError."""
    a = np.asarray(array)
    if a.dtype != np.float32:
        raise TypeError(
            f"'{name}': gradients must be float32 arrays, got {a.dtype} "
            f"(convert with .astype(np.float32))"
        )
    if a.shape not in shapes:
        want = " or ".join(str(s) for s in dict.fromkeys(shapes))
        raise ValueError(f"'{name}': gradient has shape {a.shape}, expected {want}")
    return np.ascontiguousarray(a).reshape(-1)


def _check_finite(name, grads, ids=None, row_width=1):
    """ValueError naming the first NaN/Inf (its element, or its id's row)."""
    finite = np.isfinite(grads)
    if finite.all():
        return
    bad = int(np.argmin(finite.reshape(-1)))
    value = grads.reshape(-1)[bad]
    where = (
        f"element {bad}"
        if ids is None
        else f"the row of id {int(ids[bad // row_width])} (summed over its repeats)"
    )
    raise ValueError(
        f"push of '{name}': gradient {where} is {value}; " f"nothing was sent to any PS"
    )


def _ids(name, ids):
    a = np.asarray(ids)
    if a.dtype.kind not in "iu":
        raise TypeError(f"'{name}': ids must be integers, got {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64).reshape(-1)


# Failures after which a PS may or may not have applied a push (the call
# broke off). Any other code is the PS refusing it: a PS checks a whole push
# before applying any of it. The C++ client (batched_call.cc) uses the same.
_BROKE_OFF = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
}


def _push_outcome(jobs, errors):
    """What each PS did with a push, as the C++ client words it."""
    applied = [f"PS {job[0]}" for job, e in zip(jobs, errors) if e is None]
    refused = [
        f"PS {job[0]}"
        for job, e in zip(jobs, errors)
        if isinstance(e, PsError) and e.code not in _BROKE_OFF
    ]
    unknown = [
        f"PS {job[0]}"
        for job, e in zip(jobs, errors)
        if e is not None and not (isinstance(e, PsError) and e.code not in _BROKE_OFF)
    ]
    if not applied and not unknown:
        text = "nothing was applied on any PS"
    else:
        text = (
            f"applied on {', '.join(applied) or 'no PS'}; "
            f"not applied on {', '.join(refused) or 'no PS'}"
        )
    if unknown:
        text += (
            f"; unknown on {', '.join(unknown)} (the call broke off: that PS "
            f"may or may not have applied it)"
        )
    return text


class Client:
    """Connects to every PS of a cluster.

    client = psrt.Client({"cluster": {"ps": ["h1:2223", "h2:2223"]}})
    client.create_variables([psrt.embedding("emb", 1_000_000, 16, ...)])
    rows = client.pull_rows("emb", ids)          # [len(ids), 16]
    client.push_rows("emb", ids, grads)          # repeated ids summed
    """

    def __init__(
        self,
        cluster: Union[None, str, Dict[str, Any]] = None,
        timeout: float = 60.0,
        max_attempts: int = 6,
        channels_per_ps: int = 1,
        tls_ca_file: Optional[str] = None,
        tls_cert_file: Optional[str] = None,
        tls_key_file: Optional[str] = None,
        auth_token: Optional[str] = None,
        wire_dtype: str = "fp32",
        failover_wait: float = 30.0,
        mode: str = "async",
        staleness: int = 0,
        sync_timeout: float = 600.0,
        worker: Optional[WorkerInfo] = None,
    ) -> None:
        """TLS: tls_ca_file (PEM CA of the servers' certificates), plus
        tls_cert_file/tls_key_file for mutual TLS. auth_token (default
        $PSRT_AUTH_TOKEN) is sent with every call. wire_dtype: how pulled
        values and pushed gradients travel, "fp32", "bf16" (float32's
        range, 8 significant bits) or "fp16" (11 bits, magnitudes beyond
        65504 clamped); arrays in and out stay float32, and so do the
        servers' parameters (psrt/wire_dtype.py). failover_wait: with
        servers run with --replicas > 1, how long (seconds from a pull's or
        push's first failure) it keeps retrying while a backup takes the
        failed PS's shards over; its calls then go to that backup, and a
        retried push is applied once (psrt/routing.py).

        mode: how this worker's pulls and pushes take part in training
        steps, as ps_worker --mode: "async" (pushes apply on arrival), "sync"
        (each step's pushes from all workers are averaged into one update;
        a pull for step k waits until step k - 1 is applied) or "ssp" (a
        pull for step k waits until every worker pushed step k - staleness
        - 1). In sync and ssp every pull and push passes its step and every
        push reaches every PS (empty where it has nothing for one), so use
        one push per step: psrt.torch.Steps does. worker: which worker this
        is and how many there are (sync and ssp; default psrt.worker_info(),
        from torchrun's or TF_CONFIG's variables). sync_timeout: how long a pull
        waits for the other workers before failing, naming them."""
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {sorted(_MODES)}, got {mode!r}")
        if not (isinstance(staleness, int) and 0 <= staleness <= 1 << 20):
            raise ValueError(f"staleness must be an integer in [0, 2^20], got {staleness!r}")
        if not (isinstance(sync_timeout, numbers.Real) and 0 < sync_timeout <= 86400):
            raise ValueError(f"sync_timeout must be in (0, 86400] seconds, got {sync_timeout!r}")
        self.mode = mode
        if worker is None:  # async pushes name no worker: no environment needed
            worker = worker_info() if mode != "async" else WorkerInfo(0, 1, 0)
        self.worker = worker
        self._consistency = ps_pb2.Consistency(
            mode=_MODES[mode],
            workers=self.worker.world_size,
            staleness=staleness,
            timeout_seconds=sync_timeout,
        )
        # After a sync pull: the lowest step not yet applied on the shards
        # it read (a worker that starts late resumes from it).
        self.sync_step = 0
        self._wire_dtype = wire.parse(wire_dtype)
        self.addresses = load_cluster(cluster)
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.failover_wait = failover_wait
        self._routing = Routing(self.addresses)
        options = [
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
        # Separate TCP connections per PS (a local subchannel pool each):
        # large pulls are split over them.
        token = auth_token if auth_token is not None else os.environ.get("PSRT_AUTH_TOKEN", "")
        self._metadata = (("authorization", f"Bearer {token.strip()}"),) if token.strip() else ()
        credentials = None
        if tls_ca_file or tls_cert_file:

            def read(path):
                if not path:
                    return None
                with open(path, "rb") as f:
                    return f.read()

            credentials = grpc.ssl_channel_credentials(
                root_certificates=read(tls_ca_file),
                private_key=read(tls_key_file),
                certificate_chain=read(tls_cert_file),
            )

        def channel(address):
            opts = options + [("grpc.use_local_subchannel_pool", 1)]
            if credentials is None:
                return grpc.insecure_channel(address, options=opts)
            return grpc.secure_channel(address, credentials, options=opts)

        self._all_channels = [
            [channel(a) for _ in range(max(1, channels_per_ps))] for a in self.addresses
        ]
        self._channels = [c[0] for c in self._all_channels]
        self._stubs = [ps_pb2_grpc.ParameterServerStub(c) for c in self._channels]
        self._pull = [
            [
                c.unary_stream(
                    "/psrt.ParameterServer/Pull",
                    request_serializer=frame.identity,
                    response_deserializer=frame.identity,
                )
                for c in channels
            ]
            for channels in self._all_channels
        ]
        self._push = [
            c.stream_unary(
                "/psrt.ParameterServer/Push",
                request_serializer=frame.identity,
                response_deserializer=ps_pb2.PushResponse.FromString,
            )
            for c in self._channels
        ]
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max(2, len(self.addresses) * max(1, channels_per_ps))
        )
        self._map = ShardMap()
        self._lock = threading.Lock()
        self._client_id = random.getrandbits(63) | 1
        self._request_id = 0

    @property
    def num_ps(self) -> int:
        return len(self.addresses)

    def close(self) -> None:
        self._pool.shutdown()
        for channels in self._all_channels:
            for c in channels:
                c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- calls, retries, errors -------------------------------------------

    def _call(self, ps, fn, what):
        delay = 0.1
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn()
            except grpc.RpcError as e:
                code = e.code()
                if code in _RETRYABLE and attempt < self.max_attempts:
                    time.sleep(delay * (0.5 + random.random() / 2))
                    delay = min(delay * 2, 5.0)
                    continue
                raise PsError(code, f"{what} to {self.addresses[ps]}: {e.details()}", ps) from None

    def _routed_call(self, ps, fn, what):
        """fn(target) against the PS serving task `ps`'s shards now: `ps`
        itself, or after a failover the backup that took them over. Retried
        as _call does, and past max_attempts while the servers keep
        replicas and failover_wait has not passed since the first failure,
        learning failovers between tries (as the C++ client does)."""
        delay = 0.1
        first_failure = None
        attempt = 0
        while True:
            attempt += 1
            target = self._routing.serving(ps)
            try:
                return fn(target)
            except grpc.RpcError as e:
                code = e.code()
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                rerouted = code in _RETRYABLE and self._routing.refresh(self._ask_stats)
                within_failover = (
                    self._routing.replicas > 1 and now - first_failure < self.failover_wait
                )
                if code not in _RETRYABLE or (attempt >= self.max_attempts and not within_failover):
                    raise PsError(
                        code, f"{what} to {self.addresses[target]}: {e.details()}", ps
                    ) from None
                if not rerouted:  # else retry where the shards are served now
                    time.sleep(delay * (0.5 + random.random() / 2))
                    delay = min(delay * 2, 2.0)

    def _ask_stats(self, ps):
        try:
            return self._stubs[ps].GetStats(
                ps_pb2.StatsRequest(), timeout=2.0, metadata=self._metadata
            )
        except grpc.RpcError:
            return None

    def wait_for_servers(self, timeout: float = 30.0) -> None:
        for i, c in enumerate(self._channels):
            try:
                grpc.channel_ready_future(c).result(timeout=timeout)
            except grpc.FutureTimeoutError:
                raise PsError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"PS {i} ({self.addresses[i]}) not reachable in {timeout} s",
                    i,
                ) from None

    # ---- catalog ----------------------------------------------------------

    def create_variables(self, specs: Sequence[ps_pb2.VariableSpec]) -> None:
        """Creates (idempotently) `specs` at the end of the catalog, PS 0
        first; every process must create the same variables in the same
        order (or call refresh_catalog()). If they all exist already, the
        whole catalog is sent to every PS again, so a PS that restarted empty
        learns it (and restores its shards, if started with --restore) --
        as the C++ client does."""
        specs = [normalize(self._copy(s)) for s in specs]
        with self._lock:
            # A creation that loses a race at PS 0 (another creator's is in
            # progress there, or the catalog moved) created nothing
            # anywhere: look at the catalog again and retry, as the C++
            # client does.
            # Another creation may be a long restore: wait up to 30 minutes.
            give_up_at = time.monotonic() + CREATION_WAIT_LIMIT_SECS
            attempt = 0
            while True:
                try:
                    self._create_locked(specs)
                    return
                except _LostCreationRace:
                    if time.monotonic() >= give_up_at:
                        raise
                    attempt += 1
                    time.sleep(min(0.02 * attempt, 1.0))

    def _create_locked(self, specs):
        self._refresh_locked()
        catalog = [v.spec for v in self._map.variables]
        fresh = []
        for s in specs:
            v = self._map.find(s.name)
            if v is None:
                fresh.append(s)
            elif v.spec != s:
                raise PsError(
                    grpc.StatusCode.ALREADY_EXISTS,
                    f"variable '{s.name}' already exists with a different spec: "
                    f"existing {{{v.spec}}}, requested {{{s}}}".replace("\n", " "),
                )
        # PS 0 gets what is new at the end of its catalog; every other PS
        # the whole catalog, so one that fell behind catches up. All or
        # nothing across PS, as the C++ client: prepare everywhere (PS 0
        # first), commit everywhere (PS 0 last), or abort where prepared.
        whole = ps_pb2.CreateVariablesRequest(
            first_index=0, specs=catalog + fresh, num_ps=self.num_ps
        )
        first = (
            ps_pb2.CreateVariablesRequest(first_index=len(catalog), specs=fresh, num_ps=self.num_ps)
            if fresh
            else whole
        )
        self._request_id += 1
        creation = (self._client_id ^ (self._request_id * 0x9E3779B97F4A7C15)) % (1 << 64)
        Phase = ps_pb2.CreateVariablesRequest

        def send(ps, request, phase):
            r = ps_pb2.CreateVariablesRequest()
            r.CopyFrom(request)
            r.phase, r.creation_id = phase, creation
            # Servers started with --restore fill the shards in the
            # background, every PS at once; AWAIT waits for each.
            r.fill_in_background = True
            if phase == Phase.AWAIT:
                r.await_ms = 5000
            if phase != Phase.PREPARE:
                del r.specs[:]
            return self._call(
                ps,
                lambda: self._stubs[ps].CreateVariables(
                    r, timeout=max(self.timeout, 600), metadata=self._metadata
                ),
                "CreateVariables",
            )

        prepared = []
        try:
            for ps in range(self.num_ps):
                send(ps, first if ps == 0 else whole, Phase.PREPARE)
                prepared.append(ps)
            for ps in prepared:
                while True:
                    try:
                        if not send(ps, first, Phase.AWAIT).restoring:
                            break
                    except PsError as e:
                        # A server older than AWAIT filled its shards in
                        # PREPARE already.
                        if e.code == grpc.StatusCode.INVALID_ARGUMENT and (
                            "unknown phase" in e.server_message
                        ):
                            break
                        raise
        except PsError as e:
            for ps in prepared:
                try:
                    send(ps, first, Phase.ABORT)
                except PsError:
                    pass  # a prepared creation is discarded after 60 s anyway
            error = (
                _LostCreationRace
                if e.code == grpc.StatusCode.FAILED_PRECONDITION and not prepared
                else PsError
            )
            raise error(
                e.code, f"{e.server_message} [nothing was created on any PS]", e.ps
            ) from None
        for ps in reversed(range(self.num_ps)):
            send(ps, first, Phase.COMMIT)
        self._refresh_locked()

    def refresh_catalog(self) -> None:
        with self._lock:
            self._refresh_locked()

    def _refresh_locked(self):
        # The catalog and where every shard lives, as PS 0 has them: the
        # client does not recompute placement.
        response = self._call(
            0,
            lambda: self._stubs[0].ListVariables(
                ps_pb2.ListVariablesRequest(with_layout=True),
                timeout=self.timeout,
                metadata=self._metadata,
            ),
            "ListVariables",
        )
        if len(response.variables) == len(self._map.variables):
            return
        if response.num_ps != self.num_ps:
            raise PsError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"PS 0 ({self.addresses[0]}) belongs to a cluster of {response.num_ps} "
                f"PS, this client was given {self.num_ps} addresses",
                0,
            )
        self._map = ShardMap.from_listing(response)

    @staticmethod
    def _copy(spec):
        out = ps_pb2.VariableSpec()
        out.CopyFrom(spec)
        return out

    def layout(self, name: str) -> Any:
        v = self._map.find(name)
        if v is None:
            with self._lock:
                self._refresh_locked()
            v = self._map.find(name)
        if v is None:
            raise PsError(grpc.StatusCode.NOT_FOUND, f"unknown variable '{name}'")
        return v

    def list_variables(self) -> List[ps_pb2.ListVariablesResponse]:
        return [
            self._call(
                ps,
                lambda ps=ps: self._stubs[ps].ListVariables(
                    ps_pb2.ListVariablesRequest(),
                    timeout=self.timeout,
                    metadata=self._metadata,
                ),
                "ListVariables",
            )
            for ps in range(self.num_ps)
        ]

    def stats(self) -> List[ps_pb2.StatsResponse]:
        return [
            self._call(
                ps,
                lambda ps=ps: self._stubs[ps].GetStats(
                    ps_pb2.StatsRequest(), timeout=self.timeout, metadata=self._metadata
                ),
                "GetStats",
            )
            for ps in range(self.num_ps)
        ]

    def checkpoint(self, uri: str = "", timeout: float = 3600.0) -> ps_pb2.CheckpointResponse:
        """Every PS saves its shards (PS 0 coordinates) under the servers'
        --checkpoint_uri; returns CheckpointResponse (uri, global_step,
        bytes, seconds). A non-empty `uri` must name that same root (the
        servers refuse any other)."""
        return self._call(
            0,
            lambda: self._stubs[0].Checkpoint(
                ps_pb2.CheckpointRequest(checkpoint_uri=uri),
                timeout=timeout,
                metadata=self._metadata,
            ),
            "Checkpoint",
        )

    # ---- planning ---------------------------------------------------------

    @staticmethod
    def _unique(v, ids):
        """np.unique(ids, return_inverse=True), by a table over the
        vocabulary when it is small next to the batch (no sort)."""
        if v.kind == ps_pb2.HASH_EMBEDDING or ids.size == 0:
            return np.unique(ids, return_inverse=True)
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= v.rows:
            raise ValueError(f"'{v.name}': ids must lie in [0, {v.rows}), got [{lo}, {hi}]")
        span = hi - lo + 1
        if span > max(64 * ids.size, 1 << 16) or span > (1 << 25):
            return np.unique(ids, return_inverse=True)
        local = ids - lo
        seen = np.zeros(span, np.bool_)
        seen[local] = True
        unique = np.flatnonzero(seen)
        if unique.size == ids.size:
            return ids, None  # already unique: keep the caller's order
        slot = np.empty(span, np.int32)
        slot[unique] = np.arange(unique.size, dtype=np.int32)
        inverse = slot[local]
        unique += lo
        return unique, inverse

    def _plan_rows(self, v, ids):
        """Unique ids of `ids` grouped by shard: (unique, inverse, [(shard,
        start, end)]) with unique sorted by shard; inverse maps each id to
        its unique row, None when that is the identity."""
        unique, inverse = self._unique(v, ids)
        if (
            v.kind != ps_pb2.HASH_EMBEDDING
            and unique.size
            and (unique[0] < 0 or unique[-1] >= v.rows)
        ):
            raise ValueError(
                f"'{v.name}': ids must lie in [0, {v.rows}), got " f"[{unique[0]}, {unique[-1]}]"
            )
        if len(v.shards) == 1:
            return unique, inverse, [(0, 0, int(unique.size))] if unique.size else []
        shard = v.shard_of(unique)
        # Shard numbers fit 16 bits: numpy's stable sort is a radix sort.
        order = np.argsort(shard.astype(np.uint16), kind="stable")
        unique = unique[order]
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        inverse = position if inverse is None else position[inverse]
        shard = shard[order]
        bounds = np.flatnonzero(np.diff(shard)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [unique.size]))
        groups = [(int(shard[s]), int(s), int(e)) for s, e in zip(starts, ends) if e > s]
        return unique, inverse, groups

    def _fan_out(self, fn, per_ps, *args):
        """fn(ps, items, *args) for every PS with items, in parallel."""
        self._run_jobs(fn, [(ps, items, *args) for ps, items in enumerate(per_ps) if items])

    def _run_jobs(self, fn, jobs, outcome=None):
        """fn(*job) for every job, in parallel (the last one on this
        thread); raises the first error after all finished. With `outcome`,
        a PsError's message gets outcome(jobs, errors) appended (errors[i]:
        job i's exception or None)."""
        futures = [self._pool.submit(fn, *job) for job in jobs[:-1]]
        errors = [None] * len(jobs)
        if jobs:
            try:
                fn(*jobs[-1])
            except Exception as e:  # still wait for the others
                errors[-1] = e
        for i, f in enumerate(futures):
            try:
                f.result()
            except Exception as e:
                errors[i] = e
        error = next((e for e in errors if e is not None), None)
        if error is None:
            return
        if outcome is not None and isinstance(error, PsError):
            raise PsError(
                error.code,
                f"{error.server_message} [{outcome(jobs, errors)}]",
                error.ps,
            ) from None
        raise error

    # ---- pull -------------------------------------------------------------

    def pull(self, ops: Dict[str, Optional[ArrayLike]], step: int = 0) -> Dict[str, np.ndarray]:
        """Batched pull: `ops` maps variable name -> ids (embedding) or None
        (whole dense variable). One Pull call per PS, all in parallel.
        Returns name -> array ([len(ids), dim] or the variable's shape)."""
        per_ps = [[] for _ in range(self.num_ps)]  # _PullPiece lists
        results, finish = {}, []
        sync_steps = {} if self.mode == "sync" else None  # PS -> its sync_step
        for name, ids in ops.items():
            v = self.layout(name)
            if v.kind == DENSE:
                if ids is not None:
                    raise ValueError(f"'{name}' is dense: pull it with None, not ids")
                out = np.empty(v.rows * v.row_width, dtype=np.float32)
                for sh in v.shards:
                    count = sh.num_rows * v.row_width
                    item = ps_pb2.TensorItem(variable=name, shard=sh.shard, offset=0, count=count)
                    per_ps[sh.ps_task].append(
                        _PullPiece(item, None, out, sh.row_begin * v.row_width, count)
                    )
                results[name] = out
                finish.append((name, lambda o=out, v=v: o.reshape(tuple(v.spec.shape) or (1,))))
            else:
                ids = _ids(name, ids)
                unique, inverse, groups = self._plan_rows(v, ids)
                rows = np.empty((unique.size, v.row_width), dtype=np.float32)
                for shard, s, e in groups:
                    item = ps_pb2.TensorItem(variable=name, shard=shard)
                    per_ps[v.shards[shard].ps_task].append(
                        _PullPiece(
                            item,
                            unique[s:e],
                            rows.reshape(-1),
                            s * v.row_width,
                            (e - s) * v.row_width,
                        )
                    )
                finish.append(
                    (
                        name,
                        lambda r=rows, inv=inverse: r if inv is None else np.take(r, inv, axis=0),
                    )
                )
        jobs = []
        for ps, items in enumerate(per_ps):
            if not items:
                continue
            parts = self._split_pull(items, len(self._pull[ps]))
            jobs += [(ps, part, step, c, sync_steps) for c, part in enumerate(parts)]
        self._run_jobs(self._pull_one, jobs)
        if sync_steps:
            self.sync_step = min(sync_steps.values())
        return {name: make() for name, make in finish}

    @staticmethod
    def _split_pull(items, ways):
        """Splits one PS's pull items into up to `ways` requests of about
        equal size when they are large (>= 32k rows' or 1M floats' worth)."""
        total = sum(p.count for p in items)
        if (
            ways < 2
            or total < (1 << 20)
            and sum(0 if p.ids is None else p.ids.size for p in items) < 32768
        ):
            return [items]
        target = -(-total // ways)
        parts, current, size = [], [], 0
        queue = list(items)
        while queue:
            piece = queue.pop(0)
            item, ids, out, offset, count = piece
            room = target - size
            if count > room and room > 0 and len(parts) < ways - 1:
                # Cut this item: rows (whole rows) or a dense range.
                if ids is not None:
                    width = count // ids.size
                    cut = max(1, room // width)
                    head = _PullPiece(
                        ps_pb2.TensorItem(variable=item.variable, shard=item.shard),
                        ids[:cut],
                        out,
                        offset,
                        cut * width,
                    )
                    tail = _PullPiece(
                        ps_pb2.TensorItem(variable=item.variable, shard=item.shard),
                        ids[cut:],
                        out,
                        offset + cut * width,
                        count - cut * width,
                    )
                else:
                    head = _PullPiece(
                        ps_pb2.TensorItem(
                            variable=item.variable,
                            shard=item.shard,
                            offset=item.offset,
                            count=room,
                        ),
                        None,
                        out,
                        offset,
                        room,
                    )
                    tail = _PullPiece(
                        ps_pb2.TensorItem(
                            variable=item.variable,
                            shard=item.shard,
                            offset=item.offset + room,
                            count=count - room,
                        ),
                        None,
                        out,
                        offset + room,
                        count - room,
                    )
                if head.count > 0 and tail.count > 0:
                    current.append(head)
                    parts.append(current)
                    current, size = [], 0
                    queue.insert(0, tail)
                    continue
            current.append(piece)
            size += count
            if size >= target and len(parts) < ways - 1:
                parts.append(current)
                current, size = [], 0
        if current:
            parts.append(current)
        return parts

    def _pull_one(self, ps, items, step, channel=0, sync_steps=None):
        header = ps_pb2.PullRequestHeader(
            step=step, max_response_message_bytes=PULL_MESSAGE_BYTES, for_ps=ps
        )
        if self.mode != "async":
            header.consistency.CopyFrom(self._consistency)
            header.worker_index = self.worker.rank
        payloads = []
        for p in items:
            if p.ids is not None:
                p.item.ids_payload = len(payloads)
                payloads.append(p.ids)
            p.item.dtype = self._wire_dtype
            header.items.append(p.item)
        request = frame.encode(header.SerializeToString(), payloads)
        received = [0] * len(items)

        def run(serving):
            for i in range(len(received)):
                received[i] = 0
            for message in self._pull[serving][channel](
                request, timeout=self.timeout, metadata=self._metadata
            ):
                head, pays = frame.decode(message)
                h = ps_pb2.PullResponseHeader.FromString(head)
                if sync_steps is not None:
                    sync_steps[ps] = h.sync_step
                for piece in h.pieces:
                    target = items[piece.item]
                    try:
                        values = wire.decode(piece.dtype, pays[piece.values_payload])
                    except ValueError as e:
                        raise PsError(grpc.StatusCode.DATA_LOSS, f"PS {serving}: {e}") from e
                    start = target.offset + piece.first_float
                    if piece.first_float + values.size > target.count:
                        raise PsError(
                            grpc.StatusCode.DATA_LOSS,
                            f"PS {serving} sent too many values for item {piece.item}",
                        )
                    target.out[start : start + values.size] = values
                    received[piece.item] += values.size
            for i, p in enumerate(items):
                if received[i] != p.count:
                    raise PsError(
                        grpc.StatusCode.DATA_LOSS,
                        f"PS {serving} sent {received[i]} of {p.count} values of "
                        f"'{p.item.variable}' shard {p.item.shard}",
                    )

        self._routed_call(ps, run, "Pull")

    def pull_dense(self, name: str) -> np.ndarray:
        return self.pull({name: None})[name]

    def pull_rows(self, name: str, ids: ArrayLike) -> np.ndarray:
        return self.pull({name: ids})[name]

    # ---- push -------------------------------------------------------------

    def push(
        self,
        ops: Dict[str, Any],
        step: int = 0,
        learning_rates: Optional[Dict[str, float]] = None,
    ) -> None:
        """Batched push: `ops` maps name -> gradient (dense: float32 of the
        variable's shape, or flat) or (ids, grads) with float32 grads of shape
        [len(ids), *row shape]; repeated ids are summed. Every op is checked
        (dtype, shape, ids in range, finite values after summing, learning
        rate) before anything is sent, so a bad push changes nothing on any
        PS. One Push call per PS, in parallel; if one PS refuses or a call
        breaks off, the PsError says which PS applied its part."""
        learning_rates = learning_rates or {}
        per_ps = [[] for _ in range(self.num_ps)]  # (item, ids, grads)
        for name, op in ops.items():
            v = self.layout(name)
            lr = learning_rates.get(name, 0.0)
            if not (isinstance(lr, numbers.Real) and np.isfinite(lr) and lr >= 0):
                raise ValueError(
                    f"push of '{name}': learning_rate {lr!r} must be a "
                    f"finite number >= 0 (0 = the variable's own)"
                )
            lr = float(lr)
            shape = tuple(int(d) for d in v.spec.shape)
            row_shape = shape[1:]
            if v.kind == DENSE:
                grad = _gradient(name, op, [shape, (v.rows * v.row_width,)])
                _check_finite(name, grad)
                limit = MESSAGE_BYTES // 4
                for sh in v.shards:
                    base = sh.row_begin * v.row_width
                    size = sh.num_rows * v.row_width
                    for off in range(0, size, limit):
                        count = min(limit, size - off)
                        item = ps_pb2.TensorItem(
                            variable=name,
                            shard=sh.shard,
                            offset=off,
                            count=count,
                            learning_rate=lr,
                        )
                        per_ps[sh.ps_task].append(
                            _PushPiece(item, None, grad[base + off : base + off + count])
                        )
            else:
                ids, grads = op
                id_shape = np.shape(ids)
                ids = _ids(name, ids)
                grads = _gradient(
                    name, grads, [(ids.size,) + row_shape, tuple(id_shape) + row_shape]
                ).reshape(-1, v.row_width)
                unique, inverse, groups = self._plan_rows(v, ids)
                if inverse is None:
                    summed = grads
                elif unique.size != ids.size:
                    order = np.argsort(inverse, kind="stable")
                    starts = np.flatnonzero(np.diff(inverse[order], prepend=-1))
                    summed = np.add.reduceat(grads[order], starts, axis=0)
                else:
                    summed = np.empty_like(grads)
                    summed[inverse] = grads
                _check_finite(name, summed, unique, v.row_width)
                rows_per_item = max(1, MESSAGE_BYTES // (4 * v.row_width))
                for shard, s, e in groups:
                    for a in range(s, e, rows_per_item):
                        b = min(e, a + rows_per_item)
                        item = ps_pb2.TensorItem(variable=name, shard=shard, learning_rate=lr)
                        per_ps[v.shards[shard].ps_task].append(
                            _PushPiece(item, unique[a:b], summed[a:b])
                        )
        with self._lock:
            self._request_id += 1
            request_id = self._request_id
        # Sync and SSP count every worker's step at every PS: a PS with
        # nothing to update still gets an (empty) push.
        every_ps = self.mode != "async"
        jobs = [
            (ps, items, step, request_id) for ps, items in enumerate(per_ps) if items or every_ps
        ]
        self._run_jobs(self._push_one, jobs, outcome=_push_outcome)

    def _push_one(self, ps, items, step, request_id):
        messages, header, payloads, size = [], ps_pb2.PushRequestHeader(), [], 0

        def flush():
            nonlocal header, payloads, size
            messages.append((header, payloads))
            header, payloads, size = ps_pb2.PushRequestHeader(), [], 0

        for item, ids, grads in items:
            grads = wire.encode(self._wire_dtype, grads)
            item.dtype = self._wire_dtype
            nbytes = grads.nbytes + (ids.nbytes if ids is not None else 0)
            if size and size + nbytes > MESSAGE_BYTES:
                flush()
            if ids is not None:
                item.ids_payload = len(payloads)
                payloads.append(ids)
            item.grad_payload = len(payloads)
            payloads.append(grads)
            header.items.append(item)
            size += nbytes
        flush()
        first = messages[0][0]
        first.client_id, first.request_id, first.step = (
            self._client_id,
            request_id,
            step,
        )
        first.for_ps = ps  # the step barrier of PS ps's shards, wherever served
        if self.mode != "async":
            first.consistency.CopyFrom(self._consistency)
            first.worker_index = self.worker.rank
        messages[-1][0].last = True
        encoded = [frame.encode(h.SerializeToString(), p) for h, p in messages]
        return self._routed_call(
            ps,
            lambda target: self._push[target](
                iter(encoded), timeout=self.timeout, metadata=self._metadata
            ),
            "Push",
        )

    def push_dense(self, name: str, grad: ArrayLike, learning_rate: float = 0.0) -> None:
        self.push({name: grad}, learning_rates={name: learning_rate})

    def push_rows(
        self, name: str, ids: ArrayLike, grads: ArrayLike, learning_rate: float = 0.0
    ) -> None:
        self.push({name: (ids, grads)}, learning_rates={name: learning_rate})
