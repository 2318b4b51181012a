"""Wires a library installed by Debian's packages into Bazel through pkg-config.

    pkg_config_repository(name = "grpc", modules = ["grpc++"])

creates @grpc//:lib, a cc_library carrying the modules' compile and link flags.
Headers stay in /usr/include (a system include path), so nothing is copied.
"""

def _flags(ctx, pkg_config, flag, modules):
    result = ctx.execute([pkg_config, flag] + modules)
    if result.return_code != 0:
        fail("pkg-config %s %s failed (is the -dev package installed? run " %
             (flag, " ".join(modules)) + "tools/install_deps.sh): " + result.stderr)
    return [f for f in result.stdout.strip().split(" ") if f]

def _pkg_config_repository_impl(ctx):
    pkg_config = ctx.which("pkg-config")
    if not pkg_config:
        fail("pkg-config is not installed; run tools/install_deps.sh")
    cflags = _flags(ctx, pkg_config, "--cflags", ctx.attr.modules)
    linkopts = _flags(ctx, pkg_config, "--libs", ctx.attr.modules) if ctx.attr.link else []

    # cc_library copts do not reach dependents: non-system include dirs are
    # linked into the repository and exported with `includes`, -D flags with
    # `defines`.
    includes, defines = [], []
    for flag in cflags:
        if flag.startswith("-I"):
            link = "include%d" % len(includes)
            ctx.symlink(flag[2:], link)
            includes.append(link)
        elif flag.startswith("-D"):
            defines.append(flag[2:])
    ctx.file("BUILD", """cc_library(
    name = "lib",
    hdrs = glob({hdrs}, allow_empty = True),
    includes = {includes},
    defines = {defines},
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(
        hdrs = repr([i + "/**" for i in includes]),
        includes = repr(includes),
        defines = repr(defines),
        linkopts = repr(linkopts + ctx.attr.extra_linkopts),
    ))

pkg_config_repository = repository_rule(
    implementation = _pkg_config_repository_impl,
    attrs = {
        "modules": attr.string_list(mandatory = True),
        "extra_linkopts": attr.string_list(),
        # False: headers only (a library the code loads itself, dlopen).
        "link": attr.bool(default = True),
    },
    local = True,
)

def _system_library_impl(ctx):
    ctx.file("BUILD", """cc_library(
    name = "lib",
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(linkopts = repr(ctx.attr.linkopts)))

# For Debian libraries that ship no pkg-config file (civetweb).
system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {"linkopts": attr.string_list(mandatory = True)},
    local = True,
)
