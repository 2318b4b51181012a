"""Generates psrt/ps_pb2.py and psrt/ps_pb2_grpc.py from proto/ps.proto
while building (protoc and grpc_python_plugin, Debian's
protobuf-compiler and protobuf-compiler-grpc); the rest is pyproject.toml.

    /usr/bin/python3 -m pip install --no-build-isolation --break-system-packages clients/python
"""
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithProtos(build_py):
    def run(self):
        super().run()
        proto_dir = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
        if not os.path.exists(os.path.join(proto_dir, "ps.proto")):
            proto_dir = os.path.join(HERE, "proto")  # from an sdist
        out = os.path.join(self.build_lib, "psrt")
        os.makedirs(out, exist_ok=True)
        plugin = shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin"
        subprocess.check_call(
            [
                shutil.which("protoc") or "protoc",
                f"--proto_path={proto_dir}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                f"--plugin=protoc-gen-grpc_python={plugin}",
                os.path.join(proto_dir, "ps.proto"),
            ]
        )
        grpc_module = os.path.join(out, "ps_pb2_grpc.py")
        with open(grpc_module) as f:
            text = f.read()
        with open(grpc_module, "w") as f:
            f.write(re.sub(r"^import ps_pb2 as", "from . import ps_pb2 as", text, flags=re.M))


setup(cmdclass={"build_py": BuildWithProtos})
