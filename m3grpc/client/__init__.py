"""Python remote client of `m3grpc serve`: the seed's handle API over gRPC.

Swap how the kit is built and the seed program runs unchanged:

    kit = RemoteMCPTestKit("127.0.0.1:50051")   # instead of MCPTestKit(store=...)

Servers are referred to by binding name (or any object with a `.name`); the
service decides what a binding runs.

The client depends on `m3grpc.wire` and the light model modules only, so it
installs alone (`pip install m3grpc`, without the `server` extra: grpcio,
grpcio-status, protobuf and pydantic) and importing it loads none of the
service's modules or dependencies (docs/architecture.md).
"""

from m3grpc.client.aio import (
    AsyncRemoteAgent,
    AsyncRemoteExecutionHandle,
    AsyncRemoteMCPTestKit,
)
from m3grpc.client.calls import TlsOptions
from m3grpc.client.sync import (
    RemoteAgent,
    RemoteExecutionHandle,
    RemoteMCPTestKit,
)
from m3grpc.servers import ServerDescription, ServerListingError, ToolDescription
from m3grpc.submit_options import RespondOutcome
from m3grpc.types import RoundPage, RoundView
from m3grpc.wire.events import (
    ExecutionFinished,
    RoundLeftPending,
    RoundPending,
    WatchEvent,
)
from m3grpc.wire.status import RemoteCallError

__all__ = [
    "AsyncRemoteAgent",
    "AsyncRemoteExecutionHandle",
    "AsyncRemoteMCPTestKit",
    "ExecutionFinished",
    "RemoteAgent",
    "RemoteCallError",
    "RemoteExecutionHandle",
    "RemoteMCPTestKit",
    "RespondOutcome",
    "RoundLeftPending",
    "RoundPage",
    "RoundPending",
    "RoundView",
    "ServerDescription",
    "ServerListingError",
    "TlsOptions",
    "ToolDescription",
    "WatchEvent",
]
