"""M3 gRPC: managed human input for MCP testing.

The embedded API of the seed is re-exported here, loaded on first use: importing
`m3grpc` (or the remote client, `m3grpc.client`) loads none of the server's
dependencies. `m3grpc.storage` holds the stores and `m3grpc.types` the public
models. The packages and which may import which: docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from m3grpc.errors import (
        ManagedInputConflict,
        ManagedInputRecoveryError,
        ManagedInputStateError,
        ManagedInputValidationError,
        ModelValidationError,
        OperationTimeout,
    )
    from m3grpc.kit import (
        Agent,
        AsyncAgent,
        AsyncExecutionHandle,
        AsyncMCPTestKit,
        ExecutionHandle,
        MCPTestKit,
    )
    from m3grpc.servers import HttpServer, StdioServer
    from m3grpc.specs import AgentSpec, ElicitationPlan, OperationSpec, PlanRule, ScriptStep
    from m3grpc.types import (
        ElicitationResponse,
        ExecutionResult,
        ExecutionState,
        ExecutionStatus,
        FormElicitationRequest,
        HumanInput,
        PendingElicitationRound,
        UrlElicitationRequest,
    )

# name -> the module that defines it (imported when the name is first used)
_EXPORTS = {
    "Agent": "m3grpc.kit",
    "AgentSpec": "m3grpc.specs",
    "AsyncAgent": "m3grpc.kit",
    "AsyncExecutionHandle": "m3grpc.kit",
    "AsyncMCPTestKit": "m3grpc.kit",
    "ElicitationPlan": "m3grpc.specs",
    "ElicitationResponse": "m3grpc.types",
    "ExecutionHandle": "m3grpc.kit",
    "ExecutionResult": "m3grpc.types",
    "ExecutionState": "m3grpc.types",
    "ExecutionStatus": "m3grpc.types",
    "FormElicitationRequest": "m3grpc.types",
    "HttpServer": "m3grpc.servers",
    "HumanInput": "m3grpc.types",
    "MCPTestKit": "m3grpc.kit",
    "ManagedInputConflict": "m3grpc.errors",
    "ManagedInputRecoveryError": "m3grpc.errors",
    "ManagedInputStateError": "m3grpc.errors",
    "ManagedInputValidationError": "m3grpc.errors",
    "ModelValidationError": "m3grpc.errors",
    "OperationSpec": "m3grpc.specs",
    "OperationTimeout": "m3grpc.errors",
    "PendingElicitationRound": "m3grpc.types",
    "PlanRule": "m3grpc.specs",
    "ScriptStep": "m3grpc.specs",
    "StdioServer": "m3grpc.servers",
    "UrlElicitationRequest": "m3grpc.types",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "Agent",
    "AgentSpec",
    "AsyncAgent",
    "AsyncExecutionHandle",
    "AsyncMCPTestKit",
    "ElicitationPlan",
    "ElicitationResponse",
    "ExecutionHandle",
    "ExecutionResult",
    "ExecutionState",
    "ExecutionStatus",
    "FormElicitationRequest",
    "HttpServer",
    "HumanInput",
    "MCPTestKit",
    "ManagedInputConflict",
    "ManagedInputRecoveryError",
    "ManagedInputStateError",
    "ManagedInputValidationError",
    "ModelValidationError",
    "OperationSpec",
    "OperationTimeout",
    "PendingElicitationRound",
    "PlanRule",
    "ScriptStep",
    "StdioServer",
    "UrlElicitationRequest",
]
