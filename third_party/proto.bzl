"""Generates C++ (and gRPC) code from .proto files with Debian's protoc.

Bazel's own proto rules would download protobuf; the system compiler and
grpc_cpp_plugin produce code matching the system libraries exactly.
"""

def cc_system_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    cmd = "/usr/bin/protoc --proto_path=. --cpp_out=$(GENDIR)"
    if grpc:
        cmd += " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin"
    cmd += " $(SRCS)"
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = cmd.replace("$(SRCS)", " ".join(["$(location %s)" % s for s in srcs])),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@protobuf//:lib"] + (["@grpc//:lib"] if grpc else []),
        visibility = visibility,
    )
