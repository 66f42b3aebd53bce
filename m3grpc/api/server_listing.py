"""ListServers: the configured bindings as the wire describes them, and, on
request, the tools each server lists (discovered by connecting to it).

Only names, transports, protocol generations and the servers' own tool
descriptions go out: never a command, URL, header or environment.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from m3grpc.clipping import clip
from m3grpc.errors import ServerBindingNotFoundError
from m3grpc.runtime import ToolListing, list_tools
from m3grpc.servers import ServerBinding, StdioServer
from m3grpc.wire import convert
from m3grpc.wire.gen.m3.v1 import execution_service_pb2 as pb

# How long one binding may take to connect and list its tools.
DISCOVERY_TIMEOUT_SECONDS = 30.0

_PROTOCOLS = {
    "auto": pb.PROTOCOL_GENERATION_AUTO,
    "legacy": pb.PROTOCOL_GENERATION_LEGACY,
    "2026-07-28": pb.PROTOCOL_GENERATION_MULTI_ROUND_TRIP,
}


def binding_not_found(
    name: str, bindings: Mapping[str, ServerBinding]
) -> ServerBindingNotFoundError:
    """SERVER_BINDING_NOT_FOUND naming the configured bindings (message and metadata)."""
    known = sorted(bindings)
    listed = ", ".join(known) if known else "none"
    return ServerBindingNotFoundError(
        f"no server binding named {clip(name)} is configured; configured: {listed}",
        metadata={"server": clip(name), "known_servers": ",".join(known)},
    )


def _chosen(names: Sequence[str], bindings: Mapping[str, ServerBinding]) -> list[ServerBinding]:
    if not names:
        return [bindings[name] for name in sorted(bindings)]
    for name in names:
        if name not in bindings:
            raise binding_not_found(name, bindings)
    return [bindings[name] for name in sorted(set(names))]


def _info(binding: ServerBinding, listing: ToolListing | None) -> pb.ServerInfo:
    info = pb.ServerInfo(
        name=binding.name,
        transport=(
            pb.SERVER_TRANSPORT_STDIO
            if isinstance(binding, StdioServer)
            else pb.SERVER_TRANSPORT_STREAMABLE_HTTP
        ),
        protocol=_PROTOCOLS[binding.protocol],
    )
    if listing is None:
        return info
    info.negotiated_protocol_version = listing.protocol_version
    if listing.failure_code is not None:
        info.tools_error.code = listing.failure_code
        info.tools_error.message = listing.failure_message or ""
        return info
    for tool in listing.tools:
        entry = info.tools.add(name=tool.name, title=tool.title, description=tool.description)
        try:
            entry.input_schema.CopyFrom(convert.dict_to_struct(tool.input_schema))
        except (ValueError, TypeError):
            entry.ClearField("input_schema")  # not JSON a Struct can hold
    return info


async def list_servers(
    request: pb.ListServersRequest, bindings: Mapping[str, ServerBinding]
) -> pb.ListServersResponse:
    chosen = _chosen(list(request.names), bindings)
    listings: list[ToolListing | None] = [None] * len(chosen)
    if request.include_tools:
        listings = list(
            await asyncio.gather(
                *(list_tools(b, timeout=DISCOVERY_TIMEOUT_SECONDS) for b in chosen)
            )
        )
    return pb.ListServersResponse(
        servers=[_info(binding, listing) for binding, listing in zip(chosen, listings, strict=True)]
    )
