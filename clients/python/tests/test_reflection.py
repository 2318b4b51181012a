"""gRPC server reflection, as grpcurl uses it: a client that knows nothing of
ps.proto lists the services, fetches psrt's schema from the server, builds
the messages from it and calls a method. The reflection messages are
declared here from the protocol's published field numbers
(grpc.reflection.v1alpha), since Debian ships no reflection client."""

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SERVICE = "grpc.reflection.v1alpha.ServerReflection"


def _reflection_messages():
    """ServerReflectionRequest/Response with the fields a grpcurl-like
    client uses."""
    f = descriptor_pb2.FileDescriptorProto(
        name="psrt_test_reflection.proto", package="grpc.reflection.v1alpha"
    )
    string, bytes_, message, int32 = 9, 12, 11, 5
    optional, repeated = 1, 3

    def msg(name, fields):
        m = f.message_type.add(name=name)
        for number, field_name, kind, label, type_name in fields:
            fd = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                fd.type_name = f".grpc.reflection.v1alpha.{type_name}"

    msg(
        "ServerReflectionRequest",
        [
            (1, "host", string, optional, None),
            (3, "file_by_filename", string, optional, None),
            (4, "file_containing_symbol", string, optional, None),
            (7, "list_services", string, optional, None),
        ],
    )
    msg("FileDescriptorResponse", [(1, "file_descriptor_proto", bytes_, repeated, None)])
    msg("ServiceResponse", [(1, "name", string, optional, None)])
    msg("ListServiceResponse", [(1, "service", message, repeated, "ServiceResponse")])
    msg(
        "ErrorResponse",
        [
            (1, "error_code", int32, optional, None),
            (2, "error_message", string, optional, None),
        ],
    )
    msg(
        "ServerReflectionResponse",
        [
            (1, "valid_host", string, optional, None),
            (
                4,
                "file_descriptor_response",
                message,
                optional,
                "FileDescriptorResponse",
            ),
            (6, "list_services_response", message, optional, "ListServiceResponse"),
            (7, "error_response", message, optional, "ErrorResponse"),
        ],
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    get = message_factory.MessageFactory(pool).GetPrototype
    return (
        get(pool.FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionRequest")),
        get(pool.FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionResponse")),
    )


def _ask(channel, requests):
    Request, Response = _reflection_messages()
    call = channel.stream_stream(
        f"/{SERVICE}/ServerReflectionInfo",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=Response.FromString,
    )
    return list(call(iter([Request(**r) for r in requests]), timeout=10))


def _schema(channel, symbol):
    """The FileDescriptorProtos of `symbol`'s file and its imports, in a
    fresh pool (as grpcurl builds one)."""
    [answer] = _ask(channel, [{"file_containing_symbol": symbol}])
    assert not answer.HasField("error_response"), answer.error_response
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(b)
        for b in answer.file_descriptor_response.file_descriptor_proto
    ]
    pool = descriptor_pool.DescriptorPool()
    added = set()
    while len(added) < len(files):  # dependencies first
        for fd in files:
            if fd.name not in added and all(d in added for d in fd.dependency):
                pool.Add(fd)
                added.add(fd.name)
    return files, pool


def test_grpcurl_style_client_lists_and_calls_psrt(make_cluster):
    cluster = make_cluster(1)
    channel = grpc.insecure_channel(cluster.addresses[0])
    [listing] = _ask(channel, [{"list_services": ""}])
    services = {s.name for s in listing.list_services_response.service}
    assert {"psrt.ParameterServer", "grpc.health.v1.Health", SERVICE} <= services

    files, pool = _schema(channel, "psrt.ParameterServer")
    service = pool.FindServiceByName("psrt.ParameterServer")
    methods = {m.name for m in service.methods}
    assert {"CreateVariables", "GetStats", "Pull", "Push", "Checkpoint"} <= methods
    assert any(f.name.endswith("ps.proto") for f in files), [f.name for f in files]

    # GetStats with messages built only from the reflected schema.
    method = service.methods_by_name["GetStats"]
    factory = message_factory.MessageFactory(pool)
    Request = factory.GetPrototype(method.input_type)
    Response = factory.GetPrototype(method.output_type)
    stats = channel.unary_unary(
        "/psrt.ParameterServer/GetStats",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=Response.FromString,
    )(Request(), timeout=10)
    assert stats.ps_task == 0
    assert stats.num_shards == 0
    assert stats.uptime_seconds > 0

    # An unknown symbol is an error answer, and the server keeps serving.
    [missing] = _ask(channel, [{"file_containing_symbol": "psrt.NoSuchService"}])
    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
    channel.close()


def _unimplemented(address):
    channel = grpc.insecure_channel(address)
    try:
        _ask(channel, [{"list_services": ""}])
        return False
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e
        return True
    finally:
        channel.close()


def test_reflection_is_off_where_it_would_bypass_the_token(make_cluster, tmp_path):
    """Reflection cannot check --auth_token_file's token: a cluster with one
    serves it only when told to (--grpc_reflection=on); off turns it off."""
    token = tmp_path / "token"
    token.write_text("reflect-token\n")
    secured = ["--auth_token_file=" + str(token)]
    kwargs = {"auth_token": "reflect-token"}
    assert _unimplemented(make_cluster(1, secured, kwargs).addresses[0])
    on = make_cluster(1, secured + ["--grpc_reflection=on"], kwargs)
    assert not _unimplemented(on.addresses[0])
    assert _unimplemented(make_cluster(1, ["--grpc_reflection=off"]).addresses[0])
