"""Durable storage of executions and managed-input rounds (SQLAlchemy: SQLite, PostgreSQL)."""

from m3grpc.storage.events import EventKind, OwnedEvent, StoredEvent
from m3grpc.storage.executions import (
    ClaimedExecution,
    CreatedExecution,
    EphemeralExecutionStore,
    SqlExecutionStore,
    SQLiteExecutionStore,
)
from m3grpc.storage.managed_input import (
    ManagedInputStore,
    ResponseSubmission,
    SQLiteManagedInputStore,
    SqlManagedInputStore,
)
from m3grpc.storage.schema_version import SchemaVersionError
from m3grpc.storage.transitions import RECOVERY_FAILURE_CODE
from m3grpc.types import (
    ManagedInputLease,
    ManagedInputRecord,
    ManagedInputStatus,
    RedactedResponses,
)

__all__ = [
    "RECOVERY_FAILURE_CODE",
    "ClaimedExecution",
    "CreatedExecution",
    "EphemeralExecutionStore",
    "EventKind",
    "ManagedInputLease",
    "ManagedInputRecord",
    "ManagedInputStatus",
    "ManagedInputStore",
    "OwnedEvent",
    "RedactedResponses",
    "ResponseSubmission",
    "SQLiteExecutionStore",
    "SQLiteManagedInputStore",
    "SchemaVersionError",
    "SqlExecutionStore",
    "SqlManagedInputStore",
    "StoredEvent",
]
