"""Python remote client of `m3grpc serve`: the seed's handle API over gRPC.

Swap how the kit is built and the seed program runs unchanged:

    kit = RemoteMCPTestKit("127.0.0.1:50051")   # instead of MCPTestKit(store=...)

Servers are referred to by binding name (or any object with a `.name`); the
service decides what a binding runs.
"""

from m3grpc.client.aio import (
    AsyncRemoteAgent,
    AsyncRemoteExecutionHandle,
    AsyncRemoteMCPTestKit,
)
from m3grpc.client.errors import RemoteCallError
from m3grpc.client.events import (
    ExecutionFinished,
    RoundLeftPending,
    RoundPending,
    WatchEvent,
)
from m3grpc.client.sync import (
    RemoteAgent,
    RemoteExecutionHandle,
    RemoteMCPTestKit,
)
from m3grpc.submit_options import RespondOutcome

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
    "RoundPending",
    "WatchEvent",
]
