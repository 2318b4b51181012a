"""cuda_kernels: CUDA C++ compiled by nvcc into a cc_library (see cuda.bzl)."""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

# sm_80 (A100), sm_86 (A10G: g5), sm_90 (H100/H200) machine code, and PTX for
# later GPUs. (p3's V100 is sm_70, which CUDA 13 no longer targets.)
_GENCODE = [
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_86,code=sm_86",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
]

def cuda_kernels(name, src, hdrs, deps = []):
    """A cc_library of the kernels in `src`, built by nvcc, with the static
    CUDA runtime; defines PSRT_HAVE_CUDA=1 for its dependents. Without a
    toolkit: the headers only, PSRT_HAVE_CUDA unset."""
    if not CUDA_AVAILABLE:
        native.cc_library(name = name, hdrs = hdrs, deps = deps)
        return
    obj = name + ".cu.o"
    native.genrule(
        name = name + "_nvcc",
        srcs = [src] + hdrs,
        outs = [obj],
        cmd = " ".join([
            NVCC,
            "-c -O3 -std=c++17 -Xcompiler -fPIC -I.",
        ] + _GENCODE + [
            "-o $@ $(location %s)" % src,
        ]),
        message = "nvcc " + src,
    )
    native.cc_library(
        name = name,
        srcs = [obj],
        hdrs = hdrs,
        defines = ["PSRT_HAVE_CUDA=1"],
        # The static CUDA runtime's symbols are not exported from a test's
        # executable to the shared objects Bazel makes for tests: link the
        # kernels (and what calls the runtime) statically.
        linkstatic = True,
        deps = deps + ["@local_cuda//:cudart_static"],
    )
