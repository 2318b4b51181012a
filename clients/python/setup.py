"""Builds the psrt package around what Bazel makes for it
(//clients/python/psrt): _native.so, the C++ client's binding, and ps_pb2.py
from proto/ps.proto. The rest is pyproject.toml.

    /usr/bin/python3 -m pip install --no-build-isolation --break-system-packages clients/python
    python3 -m pip wheel --no-build-isolation --no-deps -w dist clients/python

They are taken from $PSRT_BUILD_DIR if set (a copy of
bazel-bin/clients/python/psrt), else built with `bazel build
//clients/python/psrt` in the checkout this file is in. The extension links
Debian 12's gRPC, protobuf, Abseil and glog: install the package where those
libraries are (deploy/image/runtime-packages.txt lists them).
"""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILT = ("_native.so", "ps_pb2.py")


def _build_dir():
    """The directory holding Bazel's build of the package."""
    given = os.environ.get("PSRT_BUILD_DIR")
    if given:
        missing = [f for f in BUILT if not os.path.isfile(os.path.join(given, f))]
        if missing:
            raise RuntimeError(f"PSRT_BUILD_DIR={given} lacks {', '.join(missing)}")
        return given
    if not os.path.exists(os.path.join(REPO, "WORKSPACE")):
        raise RuntimeError(
            "psrt's _native.so and ps_pb2.py are built by Bazel from the psrt "
            "repository: run `bazel build //clients/python/psrt` there and set "
            "PSRT_BUILD_DIR to its bazel-bin/clients/python/psrt"
        )
    subprocess.run(["bazel", "build", "//clients/python/psrt"], cwd=REPO, check=True)
    return os.path.join(REPO, "bazel-bin", "clients", "python", "psrt")


class NativeDistribution(Distribution):
    """A platform wheel: the package holds a compiled extension."""

    def has_ext_modules(self):
        return True


class BuildWithBazelOutputs(build_py):
    def run(self):
        super().run()
        source = _build_dir()
        for name in BUILT:
            target = os.path.join(self.build_lib, "psrt", name)
            shutil.copyfile(os.path.join(source, name), target)
            os.chmod(target, 0o755 if name.endswith(".so") else 0o644)


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildWithBazelOutputs})
