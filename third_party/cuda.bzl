"""Finds the CUDA toolkit on this machine (PSRT_CUDA_PATH, else /usr/local/cuda).

    cuda_configure(name = "local_cuda")

creates @local_cuda with
  //:cudart_static  the static CUDA runtime and the toolkit's headers
  //:defs.bzl       CUDA_AVAILABLE and NVCC (the compiler's absolute path)
With no toolkit, CUDA_AVAILABLE is False and the targets are empty: the
worker is then built for the CPU only and says so when asked for a GPU.
"""

def _cuda_configure_impl(ctx):
    path = ctx.os.environ.get("PSRT_CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(path + "/bin/nvcc")
    runtime = ctx.path(path + "/lib64/libcudart_static.a")
    if nvcc.exists and runtime.exists:
        ctx.symlink(path + "/include", "include")
        ctx.symlink(runtime, "lib/libcudart_static.a")
        ctx.file("BUILD", """cc_library(
    name = "cudart_static",
    srcs = ["lib/libcudart_static.a"],
    hdrs = glob(["include/**"]),
    includes = ["include", "include/cccl"],
    linkopts = ["-ldl", "-lpthread", "-lrt"],
    visibility = ["//visibility:public"],
)
""")
        ctx.file("defs.bzl", "CUDA_AVAILABLE = True\nNVCC = %r\n" % str(nvcc))
    else:
        print("psrt: no CUDA toolkit at %s (set PSRT_CUDA_PATH); " % path +
              "ps_worker is built for the CPU only")
        ctx.file("BUILD", """cc_library(
    name = "cudart_static",
    visibility = ["//visibility:public"],
)
""")
        ctx.file("defs.bzl", "CUDA_AVAILABLE = False\nNVCC = None\n")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["PSRT_CUDA_PATH"],
    local = True,
)
