"""The package as users get it: an sdist built from this tree carries
ps.proto and py.typed, installs alone with pip (generating its gRPC modules
at build time), and the installed package talks to a real ps_server. The
compiler is not found by a hard-coded path: without one, the error says
what to install."""
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)  # clients/python
PROTO = os.path.join(os.path.dirname(os.path.dirname(PYTHON_DIR)), "proto", "ps.proto")


def copy_source(dest):
    """clients/python and proto/ps.proto as a checkout has them (Bazel's
    runfiles also hold generated modules, which a checkout does not)."""
    src = os.path.join(dest, "clients", "python")
    os.makedirs(os.path.join(src, "psrt"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copyfile(os.path.join(PYTHON_DIR, name), os.path.join(src, name))
    for path in glob.glob(os.path.join(PYTHON_DIR, "psrt", "*")):
        name = os.path.basename(path)
        if name.endswith(".py") and not name.startswith("ps_pb2") or name == "py.typed":
            shutil.copyfile(path, os.path.join(src, "psrt", name))
    os.makedirs(os.path.join(dest, "proto"))
    shutil.copyfile(PROTO, os.path.join(dest, "proto", "ps.proto"))
    return src


def test_sdist_installs_alone_and_serves(tmp_path, cluster2):
    src = copy_source(str(tmp_path / "checkout"))
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(dist)],
        cwd=src,
        check=True,
        capture_output=True,
    )
    (tarball,) = glob.glob(str(dist / "psrt-*.tar.gz"))
    names = tarfile.open(tarball).getnames()
    top = names[0].split("/")[0]
    assert f"{top}/proto/ps.proto" in names
    assert f"{top}/psrt/py.typed" in names
    assert not any(n.endswith("ps_pb2.py") for n in names)

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps"]
        + ["--no-index", "--target", str(site), tarball],
        check=True,
        capture_output=True,
    )
    for name in ("ps_pb2.py", "ps_pb2_grpc.py", "py.typed"):
        assert (site / "psrt" / name).exists(), name

    # The installed package, alone on the path (run from elsewhere, so the
    # source tree cannot be imported instead), against real servers.
    program = textwrap.dedent(
        f"""
        import numpy as np, psrt
        assert psrt.__file__.startswith({str(site)!r}), psrt.__file__
        c = psrt.Client({cluster2.spec!r})
        c.create_variables([psrt.dense("w", (4,), optimizer="sgd", learning_rate=0.5)])
        c.push_dense("w", np.full(4, 2.0, np.float32))
        print(list(c.pull_dense("w")))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", program],
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=str(site)),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert out.strip() == "[-1.0, -1.0, -1.0, -1.0]"


def test_missing_compiler_says_what_to_install(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no protoc, no plugin
    env.pop("PSRT_PROTOC", None)
    program = textwrap.dedent(
        f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "codegen", {os.path.join(PYTHON_DIR, "psrt", "_codegen.py")!r})
        codegen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(codegen)
        try:
            codegen.compiler_command("/nowhere")
        except RuntimeError as e:
            print(e)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", program], env=env, check=True, capture_output=True, text=True
    ).stdout
    if "grpc_tools" in out or not out:
        pytest.fail(f"expected the missing-compiler error, got {out!r}")
    assert "protobuf-compiler-grpc" in out and "PSRT_PROTOC" in out, out
