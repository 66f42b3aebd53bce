"""M3 gRPC: managed human input for MCP testing.

The embedded API of the seed is re-exported here; `m3grpc.storage` holds the
stores and `m3grpc.types` the public models.
"""

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
