"""The package's built modules, _native.so (the C++ client's binding) and
ps_pb2.py (from proto/ps.proto), both made by Bazel's
//clients/python/psrt targets: beside this file once installed (or in
Bazel's runfiles), else in the bazel-bin of the source checkout this file
is in."""
import importlib
import importlib.util
import os

_CHECKOUT_BUILD = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bazel-bin", "clients"
)


def load(name, suffix):
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        pass
    path = os.path.normpath(os.path.join(_CHECKOUT_BUILD, "python", "psrt", name + suffix))
    if not os.path.exists(path):
        raise ImportError(
            f"psrt's built module {name}{suffix} is missing: run `bazel build "
            "//clients/python/psrt` in the psrt checkout, or install the package "
            "(clients/python/README.md)"
        )
    spec = importlib.util.spec_from_file_location(f"{__package__}.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
