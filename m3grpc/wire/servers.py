"""ListServersResponse -> the models a remote client returns (m3grpc.servers)."""

from __future__ import annotations

from m3grpc.servers import McpProtocol, ServerDescription, ServerListingError, ToolDescription
from m3grpc.wire import convert
from m3grpc.wire.gen.m3.v1 import execution_service_pb2 as pb

_PROTOCOLS: dict[int, McpProtocol] = {
    pb.PROTOCOL_GENERATION_AUTO: "auto",
    pb.PROTOCOL_GENERATION_LEGACY: "legacy",
    pb.PROTOCOL_GENERATION_MULTI_ROUND_TRIP: "2026-07-28",
}


def server_models(response: pb.ListServersResponse) -> list[ServerDescription]:
    return [_server_model(info) for info in response.servers]


def _server_model(info: pb.ServerInfo) -> ServerDescription:
    return ServerDescription(
        name=info.name,
        transport="stdio" if info.transport == pb.SERVER_TRANSPORT_STDIO else "streamable_http",
        # A generation this client does not know yet: "auto" (the server negotiates).
        protocol=_PROTOCOLS.get(info.protocol, "auto"),
        negotiated_protocol_version=info.negotiated_protocol_version,
        tools=tuple(
            ToolDescription(
                name=tool.name,
                title=tool.title,
                description=tool.description,
                input_schema=convert.struct_to_dict(tool.input_schema),
            )
            for tool in info.tools
        ),
        tools_error=(
            ServerListingError(code=info.tools_error.code, message=info.tools_error.message)
            if info.HasField("tools_error")
            else None
        ),
    )


def list_servers_request(names: list[str] | None, include_tools: bool) -> pb.ListServersRequest:
    return pb.ListServersRequest(names=names or [], include_tools=include_tools)
