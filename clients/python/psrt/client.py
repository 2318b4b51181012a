"""psrt.Client: the C++ client (clients/cpp/client.h), bound by _native.cc.

Routing, de-duplication, retries, failover, the create protocol and the
wire are the C++ client's; this layer checks Python arguments, allocates
the arrays pulls fill, and maps errors to PsError, ValueError or TypeError."""
import json
import numbers
import os
from typing import Any, Dict, List, Optional, Sequence, Union

import grpc
import numpy as np

from ._built import load
from ._proto import ps_pb2
from .worker_info import WorkerInfo, worker_info


_native = load("_native", ".so")
DENSE = ps_pb2.DENSE
ArrayLike = Union[np.ndarray, Sequence[Any]]  # what ids and gradients may be
_Rates = Optional[Dict[str, float]]  # a push's learning rates by variable
_CODES = {c.value[0]: c for c in grpc.StatusCode}
_MODES = {"async": ps_pb2.Consistency.ASYNC, "sync": ps_pb2.Consistency.SYNC}
_MODES["ssp"] = ps_pb2.Consistency.SSP
_WIRE_DTYPES = {"fp32": ps_pb2.FLOAT32, "bf16": ps_pb2.BFLOAT16, "fp16": ps_pb2.FLOAT16}


class PsError(RuntimeError):
    """A server or transport error: `code` is the grpc.StatusCode, the message
    is the server's, prefixed with the PS that answered (`ps`)."""

    def __init__(self, code, message, ps=None):
        super().__init__(f"{code.name}: {message}" + (f" (PS {ps})" if ps is not None else ""))
        self.code, self.server_message, self.ps = code, message, ps


def _with_spec(layout):
    """A layout from _native with its spec parsed (None stays None)."""
    if layout is not None:
        layout.spec = ps_pb2.VariableSpec.FromString(layout.spec_bytes)
    return layout


def _native_call(fn, *args):
    try:
        return fn(*args)
    except _native.Error as e:
        code, message, ps, local = e.args
    if local and code in (3, 11):  # INVALID_ARGUMENT, OUT_OF_RANGE: nothing sent
        raise ValueError(message)
    raise PsError(_CODES.get(code, grpc.StatusCode.UNKNOWN), message, None if ps < 0 else ps)


def _provider_names(providers):
    """The data plane's provider names as a list, from "shm,tcp" or a
    sequence of names; ValueError when it names none or a name is empty."""
    if isinstance(providers, str):
        names = [p.strip() for p in providers.split(",")]
    elif isinstance(providers, (list, tuple)) and all(isinstance(p, str) for p in providers):
        names = [p.strip() for p in providers]
    else:
        raise ValueError(
            f"data_plane_providers must be a string or a list of names, got {providers!r}"
        )
    if not names or not all(names) or any("," in p for p in names):
        raise ValueError(
            f"data_plane_providers {providers!r}: name one provider or more (shm, tcp)"
        )
    return names


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
    """`array` as a flat float32 array if it is float32 with one of `shapes`;
    nothing is converted silently (a float64 gradient is a TypeError)."""
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


def _ids(name, ids):
    a = np.asarray(ids)
    if a.dtype.kind not in "iu":
        raise TypeError(f"'{name}': ids must be integers, got {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.int64).reshape(-1)


class Pending:
    """A pull or push in flight (start_pull / start_push): result() waits,
    without the GIL, and returns what pull() or push() would."""

    def __init__(self, client, native, finish):
        self._client, self._native, self._finish = client, native, finish

    def result(self):
        if self._native is not None:
            native, self._native = self._native, None
            _native_call(native.wait)
            if self._client.mode == "sync" and self._finish is not None:
                self._client.sync_step = native.sync_step
        return self._finish() if self._finish is not None else None


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
        channels_per_ps: int = 2,
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
        data_plane: str = "fabric",
        data_plane_providers: Union[str, Sequence[str]] = ("tcp",),
    ) -> None:
        """TLS: tls_ca_file (PEM CA of the servers), with tls_cert_file and
        tls_key_file for mutual TLS; auth_token (default $PSRT_AUTH_TOKEN)
        goes with every call. wire_dtype: "fp32", "bf16" or "fp16" on the
        wire (arrays and parameters stay float32). failover_wait: with
        --replicas > 1, how long a failing call retries while a backup takes
        over (a retried push applies once). mode: "async", "sync" (a step's
        pushes from all workers averaged into one update) or "ssp" (pulls
        at most `staleness` steps ahead), as ps_worker --mode; in sync and
        ssp push once per step (psrt.torch.Steps does). worker: rank and
        count (default psrt.worker_info()); sync_timeout: how long a pull
        waits for the other workers before failing, naming them.
        data_plane: "fabric" (the default) moves pushes and pulls over
        libfabric where the PS serves it (ps_server's default too), else
        over gRPC (said once in the log); "grpc" keeps them on gRPC.
        data_plane_providers: the libfabric providers this client may open,
        as ps_worker's --data_plane_providers ("shm,tcp" or ["shm", "tcp"]):
        "tcp" (the default) for every host; add "shm" for shared memory to
        a PS on this host (in another process) that serves it."""
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {sorted(_MODES)}, got {mode!r}")
        if not (isinstance(staleness, int) and 0 <= staleness <= 1 << 20):
            raise ValueError(f"staleness must be an integer in [0, 2^20], got {staleness!r}")
        if not (isinstance(sync_timeout, numbers.Real) and 0 < sync_timeout <= 86400):
            raise ValueError(f"sync_timeout must be in (0, 86400] seconds, got {sync_timeout!r}")
        if data_plane not in ("fabric", "grpc"):
            raise ValueError(f"data_plane must be 'fabric' or 'grpc', got {data_plane!r}")
        providers = _provider_names(data_plane_providers)
        if wire_dtype not in _WIRE_DTYPES:
            raise ValueError(f"wire_dtype {wire_dtype!r}: expected one of fp32, bf16, fp16")
        # The worker's rank also makes it a witness with 2 PS and replicas
        # (it votes and grants leases, docs/operations.md): known from an
        # explicit `worker` or the environment. Async pushes need none.
        witness = -1
        if worker is not None:
            witness = worker.rank
        elif mode != "async":
            worker = worker_info()
            witness = worker.rank
        else:
            try:
                if "RANK" in os.environ or "TF_CONFIG" in os.environ:
                    witness = worker_info().rank
            except ValueError:  # an evaluator, a chief: no worker rank
                pass
            worker = WorkerInfo(0, 1, 0)
        rank = worker.rank if mode != "async" else -1
        self.mode, self.worker, self.timeout = mode, worker, timeout
        self.sync_step = 0  # after a sync pull: the lowest step not yet applied
        self._layouts = {}  # name -> layout, with its spec parsed
        self.addresses = load_cluster(cluster)
        token = auth_token if auth_token is not None else os.environ.get("PSRT_AUTH_TOKEN", "")
        calls = (float(timeout), int(max_attempts), int(channels_per_ps), float(failover_wait))
        security = (tls_ca_file or "", tls_cert_file or "", tls_key_file or "", token.strip())
        steps = (_MODES[mode], worker.world_size, staleness, float(sync_timeout), rank, witness)
        wire = _WIRE_DTYPES[wire_dtype]
        self._client = _native_call(
            _native.Client, self.addresses, *calls, *security, wire, *steps, data_plane, providers
        )

    @property
    def num_ps(self) -> int:
        return len(self.addresses)

    def close(self) -> None:
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def wait_for_servers(self, timeout: float = 30.0) -> None:
        _native_call(self._client.wait_for_servers, float(timeout))

    def create_variables(self, specs: Sequence[ps_pb2.VariableSpec]) -> None:
        """Creates (idempotently) `specs` at the end of the catalog, on every
        PS or on none; processes create the same variables in the same order
        (or call refresh_catalog()). A PS that restarted empty learns the
        whole catalog again (and restores its shards with --restore)."""
        serialized = [s.SerializeToString() for s in specs]
        for s in serialized:
            _native.normalize(s)  # a bad spec is a ValueError naming it
        _native_call(self._client.create_variables, serialized)

    def refresh_catalog(self) -> None:
        _native_call(self._client.refresh_catalog)

    def layout(self, name: str) -> Any:
        """The variable's layout: name, kind, spec, rows, row_width and its
        shards (shard, ps_task, row_begin, num_rows), as PS 0 places them.
        Kept: a variable's layout never changes (the catalog only grows)."""
        v = self._layouts.get(name)
        if v is None:
            v = _native_call(self._client.layout, name)
            if v is None:
                raise PsError(grpc.StatusCode.NOT_FOUND, f"unknown variable '{name}'")
            self._layouts[name] = _with_spec(v)
        return v

    def serving(self, ps: int) -> int:
        """The PS serving PS `ps`'s shards now (another after a failover)."""
        return self._client.serving(ps)

    def list_variables(self) -> List[ps_pb2.ListVariablesResponse]:
        listings = _native_call(self._client.list_variables)
        return [ps_pb2.ListVariablesResponse.FromString(b) for b in listings]

    def stats(self) -> List[ps_pb2.StatsResponse]:
        return [ps_pb2.StatsResponse.FromString(b) for b in _native_call(self._client.stats)]

    def checkpoint(self, uri: str = "", timeout: float = 3600.0) -> ps_pb2.CheckpointResponse:
        """Every PS saves its shards (PS 0 coordinates) under the servers'
        --checkpoint_uri; a non-empty `uri` must name that same root."""
        response = _native_call(self._client.checkpoint, uri, float(timeout))
        return ps_pb2.CheckpointResponse.FromString(response)

    def start_pull(self, ops: Dict[str, Optional[ArrayLike]], step: int = 0, out=None) -> Pending:
        """pull(), returning at once: .result() gives its dict."""
        native_ops, results, out = [], {}, out or {}
        for name, ids in ops.items():
            v = self.layout(name)
            if v.kind == DENSE:
                if ids is not None:
                    raise ValueError(f"'{name}' is dense: pull it with None, not ids")
                shape = tuple(v.spec.shape) or (1,)
            else:
                ids = _ids(name, ids)
                shape = (ids.size, v.row_width)
            results[name] = out[name] if name in out else np.empty(shape, np.float32)
            native_ops.append((name, ids, results[name]))
        native = _native_call(self._client.start_pull, native_ops, int(step))
        return Pending(self, native, lambda: results)

    def pull(self, ops: Dict[str, Optional[ArrayLike]], step: int = 0, out=None):
        """Batched pull: `ops` maps variable name -> ids (embedding) or None
        (whole dense variable). One Pull call per PS, all in parallel.
        Returns name -> array ([len(ids), dim] or the variable's shape), a
        new one unless `out` maps the name to a C-contiguous float32 array
        of that size to fill (reused, it saves faulting in fresh pages)."""
        return self.start_pull(ops, step, out).result()

    def pull_dense(self, name: str) -> np.ndarray:
        return self.pull({name: None})[name]

    def pull_rows(self, name: str, ids: ArrayLike) -> np.ndarray:
        return self.pull({name: ids})[name]

    def start_push(self, ops: Dict[str, Any], step: int = 0, learning_rates: _Rates = None):
        """push(), returning at once: .result() waits for it."""
        learning_rates = learning_rates or {}
        native_ops = []
        for name, op in ops.items():
            v = self.layout(name)
            lr = learning_rates.get(name, 0.0)
            if not (isinstance(lr, numbers.Real) and np.isfinite(lr) and lr >= 0):
                raise ValueError(
                    f"push of '{name}': learning_rate {lr!r} must be a "
                    f"finite number >= 0 (0 = the variable's own)"
                )
            shape = tuple(int(d) for d in v.spec.shape)
            if v.kind == DENSE:
                grad = _gradient(name, op, [shape, (v.rows * v.row_width,)])
                native_ops.append((name, None, grad, float(lr)))
                continue
            ids, grads = op
            id_shape = tuple(np.shape(ids))
            ids = _ids(name, ids)
            row_shape = shape[1:]
            grads = _gradient(name, grads, [(ids.size,) + row_shape, id_shape + row_shape])
            native_ops.append((name, ids, grads, float(lr)))
        native = _native_call(self._client.start_push, native_ops, int(step))
        return Pending(self, native, None)

    def push(self, ops: Dict[str, Any], step: int = 0, learning_rates: _Rates = None) -> None:
        """Batched push: name -> dense gradient (float32, the variable's shape
        or flat) or (ids, grads [len(ids), *row shape]); repeated ids are
        summed. All is checked before anything is sent (a bad push changes
        nothing); if a PS refuses or a call breaks off, the PsError says
        which PS applied its part."""
        self.start_push(ops, step, learning_rates).result()

    def push_dense(self, name: str, grad: ArrayLike, learning_rate: float = 0.0) -> None:
        self.push({name: grad}, learning_rates={name: learning_rate})

    def push_rows(
        self, name: str, ids: ArrayLike, grads: ArrayLike, learning_rate: float = 0.0
    ) -> None:
        self.push({name: (ids, grads)}, learning_rates={name: learning_rate})
