"""Generates ps_pb2.py and ps_pb2_grpc.py from ps.proto: used by setup.py
while building the package and by _proto.py when running from a source
checkout. Self-contained (setup.py loads it by path, before psrt exists).

The compiler is found, in order: $PSRT_PROTOC (and $PSRT_GRPC_PYTHON_PLUGIN),
the grpc_tools module (pip's grpcio-tools), or protoc and grpc_python_plugin
on $PATH (Debian's protobuf-compiler and protobuf-compiler-grpc).
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys


def compiler_command(proto_dir):
    """The command line prefix that compiles ps.proto with gRPC stubs."""
    protoc = os.environ.get("PSRT_PROTOC")
    plugin = os.environ.get("PSRT_GRPC_PYTHON_PLUGIN")
    if not protoc and importlib.util.find_spec("grpc_tools") is not None:
        return [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={proto_dir}"]
    protoc = protoc or shutil.which("protoc")
    plugin = plugin or shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        raise RuntimeError(
            "psrt needs protoc and grpc_python_plugin to generate its gRPC modules "
            f"(found protoc={protoc!r}, grpc_python_plugin={plugin!r}): install "
            "Debian's protobuf-compiler and protobuf-compiler-grpc, or pip's "
            "grpcio-tools, or set PSRT_PROTOC and PSRT_GRPC_PYTHON_PLUGIN"
        )
    return [
        protoc,
        f"--proto_path={proto_dir}",
        f"--plugin=protoc-gen-grpc_python={plugin}",
    ]


def generate(proto_dir, out_dir, package_relative=True):
    """Writes ps_pb2.py and ps_pb2_grpc.py for proto_dir/ps.proto into
    out_dir; with package_relative, the stub imports its sibling from the
    package (as an installed psrt needs)."""
    os.makedirs(out_dir, exist_ok=True)
    subprocess.check_call(
        compiler_command(proto_dir)
        + [
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            os.path.join(proto_dir, "ps.proto"),
        ]
    )
    if package_relative:
        stub = os.path.join(out_dir, "ps_pb2_grpc.py")
        with open(stub) as f:
            text = f.read()
        with open(stub, "w") as f:
            f.write(re.sub(r"^import ps_pb2 as", "from . import ps_pb2 as", text, flags=re.M))
