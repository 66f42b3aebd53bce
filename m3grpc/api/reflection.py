"""Server reflection, v1 and v1alpha.

grpcio-reflection implements only `grpc.reflection.v1alpha`; clients such as
grpcurl and Postman ask for `grpc.reflection.v1` first. The two protocols have
the same messages with the same field numbers (v1 is v1alpha renamed), so the
v1 service is the same reflection servicer registered under the v1 name, its
requests and replies decoded and encoded with the v1alpha classes: the bytes
on the wire are identical. The v1 file descriptor (v1alpha's with the package
renamed) is added to the pool, so reflection can describe itself under both names.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
V1_FILE_NAME = "grpc/reflection/v1/reflection.proto"


def v1_file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The v1 reflection.proto, built from v1alpha's by renaming its package."""
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    old = f".{file.package}."
    file.name = V1_FILE_NAME
    file.package = V1_PACKAGE
    file.ClearField("options")
    for message in file.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = f".{V1_PACKAGE}." + field.type_name.removeprefix(old)
    for service in file.service:
        for method in service.method:
            method.input_type = f".{V1_PACKAGE}." + method.input_type.removeprefix(old)
            method.output_type = f".{V1_PACKAGE}." + method.output_type.removeprefix(old)
    return file


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    try:
        pool.FindFileByName(V1_FILE_NAME)
    except KeyError:
        pool.Add(v1_file_descriptor())


def enable_reflection(server: grpc.aio.Server, service_names: Sequence[str]) -> None:
    """Serve reflection v1 and v1alpha on `server`, listing `service_names` and both."""
    pool = descriptor_pool.Default()
    _add_v1_descriptor(pool)
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    servicer = reflection.aio.ReflectionServicer(names, pool=pool)
    for service_name in (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME):
        handler = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        handlers = {"ServerReflectionInfo": handler}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service_name, handlers),)
        )
