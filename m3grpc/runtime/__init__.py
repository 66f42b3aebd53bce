"""The execution runtime: worker pool, managed-input coordination, deadlines, recovery.

The api layer reaches storage and the harnesses only through the names
re-exported here.
"""

from m3grpc.harness.claude_code import ClaudeCodeSettings
from m3grpc.harness.codex import CodexSettings
from m3grpc.harness.discovery import ListedTool, ToolListing, list_tools
from m3grpc.runtime.facade import Runtime, default_harnesses
from m3grpc.runtime.worker import WorkerSettings
from m3grpc.storage import EventKind, OwnedEvent, SqlExecutionStore, StoredEvent
from m3grpc.storage.encryption import load_cipher
from m3grpc.storage.engine import faults_reported_by_caller
from m3grpc.storage.inspection import inspect_database, sqlite_location_problem
from m3grpc.storage.managed_input import redact_responses
from m3grpc.storage.schema_version import SchemaState, SchemaStatus, SchemaVersionError

__all__ = [
    "ClaudeCodeSettings",
    "CodexSettings",
    "EventKind",
    "ListedTool",
    "OwnedEvent",
    "Runtime",
    "SchemaState",
    "SchemaStatus",
    "SchemaVersionError",
    "SqlExecutionStore",
    "StoredEvent",
    "ToolListing",
    "WorkerSettings",
    "default_harnesses",
    "faults_reported_by_caller",
    "inspect_database",
    "list_tools",
    "load_cipher",
    "redact_responses",
    "sqlite_location_problem",
]
