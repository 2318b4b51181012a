"""The package as users get it: pip builds a wheel from the Python sources
and Bazel's build of the package (_native.so and ps_pb2.py), it installs
alone, and the installed package talks to a real ps_server. Without Bazel's
build, the error says how to make it."""
import glob
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)  # clients/python
# Bazel's build of the package: the runfiles, or a checkout's bazel-bin.
BUILD_DIR = next(
    d
    for d in (
        os.path.join(PYTHON_DIR, "psrt"),
        os.path.join(os.path.dirname(os.path.dirname(PYTHON_DIR)), "bazel-bin", "clients")
        + "/python/psrt",
    )
    if os.path.exists(os.path.join(d, "_native.so"))
)


def copy_source(dest):
    """clients/python's sources alone, outside any checkout."""
    src = os.path.join(dest, "clients", "python")
    os.makedirs(os.path.join(src, "psrt"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copyfile(os.path.join(PYTHON_DIR, name), os.path.join(src, name))
    for path in glob.glob(os.path.join(PYTHON_DIR, "psrt", "*")):
        name = os.path.basename(path)
        if name.endswith(".py") and name != "ps_pb2.py" or name == "py.typed":
            shutil.copyfile(path, os.path.join(src, "psrt", name))
    return src


def test_wheel_installs_alone_and_serves(tmp_path, cluster2):
    src = copy_source(str(tmp_path / "checkout"))
    dist = tmp_path / "dist"
    wheel = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-build-isolation",
        "--no-deps",
    ]
    wheel += ["--no-index", "-w", str(dist), src]
    env = {k: v for k, v in os.environ.items() if k != "PSRT_BUILD_DIR"}
    # Outside a checkout and without PSRT_BUILD_DIR: nothing to package.
    refused = subprocess.run(wheel, env=env, capture_output=True, text=True)
    assert refused.returncode != 0
    assert "bazel build //clients/python/psrt" in refused.stdout + refused.stderr
    env["PSRT_BUILD_DIR"] = BUILD_DIR
    subprocess.run(wheel, env=env, check=True, capture_output=True)
    (built,) = glob.glob(str(dist / "psrt-*.whl"))
    assert built.endswith("linux_x86_64.whl"), built  # a platform wheel
    names = zipfile.ZipFile(built).namelist()
    for name in (
        "psrt/_native.so",
        "psrt/ps_pb2.py",
        "psrt/py.typed",
        "psrt/client.py",
    ):
        assert name in names, name

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
        + ["--target", str(site), built],
        check=True,
        capture_output=True,
    )
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
