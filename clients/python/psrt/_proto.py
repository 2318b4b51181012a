"""The generated protobuf and gRPC modules for proto/ps.proto.

They are produced by the build (Bazel's //clients/python/psrt:ps_proto
genrule, or setup.py's build step when pip installs the package), never
committed. Running from a source checkout without either, they are generated
once into ~/.cache/psrt (_codegen.py says which compiler it uses).
"""
import hashlib
import importlib
import os
import sys

from . import _codegen


def _load():
    try:
        from . import ps_pb2, ps_pb2_grpc  # generated next to this file

        return ps_pb2, ps_pb2_grpc
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    proto_dir = os.path.normpath(os.path.join(here, "..", "..", "..", "proto"))
    proto = os.path.join(proto_dir, "ps.proto")
    if not os.path.exists(proto):
        raise ImportError(
            "psrt's generated modules are missing and proto/ps.proto "
            "is not beside the source; install the package with pip"
        )
    with open(proto, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    out = os.path.join(os.path.expanduser("~"), ".cache", "psrt", digest)
    if not os.path.exists(os.path.join(out, "ps_pb2_grpc.py")):
        tmp = f"{out}.tmp{os.getpid()}"
        _codegen.generate(proto_dir, tmp, package_relative=False)
        try:
            os.rename(tmp, out)
        except OSError:  # another process generated it first
            pass
    sys.path.insert(0, out)
    try:
        return importlib.import_module("ps_pb2"), importlib.import_module("ps_pb2_grpc")
    finally:
        sys.path.remove(out)


ps_pb2, ps_pb2_grpc = _load()
