"""Generates psrt/ps_pb2.py and psrt/ps_pb2_grpc.py from ps.proto while
building (psrt/_codegen.py finds the compiler: $PSRT_PROTOC, pip's
grpcio-tools, or protoc and grpc_python_plugin on $PATH); an sdist carries
ps.proto in proto/. The rest is pyproject.toml.

    /usr/bin/python3 -m pip install --no-build-isolation --break-system-packages clients/python
    python3 setup.py sdist     # dist/psrt-<version>.tar.gz, installable alone
"""
import importlib.util
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_PROTO = os.path.normpath(os.path.join(HERE, "..", "..", "proto", "ps.proto"))
SDIST_PROTO = os.path.join(HERE, "proto", "ps.proto")


def _codegen():
    spec = importlib.util.spec_from_file_location(
        "psrt_codegen", os.path.join(HERE, "psrt", "_codegen.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithProtos(build_py):
    def run(self):
        super().run()
        proto = REPO_PROTO if os.path.exists(REPO_PROTO) else SDIST_PROTO
        if not os.path.exists(proto):
            raise RuntimeError(f"ps.proto is neither at {REPO_PROTO} nor at {SDIST_PROTO}")
        _codegen().generate(os.path.dirname(proto), os.path.join(self.build_lib, "psrt"))


class SdistWithProto(sdist):
    """Puts the repository's proto/ps.proto into the sdist's proto/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        os.makedirs(os.path.join(base_dir, "proto"), exist_ok=True)
        shutil.copyfile(
            REPO_PROTO if os.path.exists(REPO_PROTO) else SDIST_PROTO,
            os.path.join(base_dir, "proto", "ps.proto"),
        )


setup(cmdclass={"build_py": BuildWithProtos, "sdist": SdistWithProto})
