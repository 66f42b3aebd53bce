"""Typed errors of M3.

Each error has a stable machine-readable `reason` (it becomes
`google.rpc.ErrorInfo.reason` on the wire) and string `metadata` (ErrorInfo
metadata). One Python type maps to one gRPC status code in the api layer.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

ERROR_DOMAIN = "m3grpc.dev"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field: a dotted/bracketed path into the request and what is wrong."""

    field: str
    description: str


class M3Error(Exception):
    """Base of every typed M3 error.

    `code` is the gRPC status code name (e.g. `"NOT_FOUND"`) of an error the
    remote client raised for a failed call; None for an embedded error.
    """

    reason: ClassVar[str] = "M3_ERROR"
    code: str | None = None

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = {k: str(v) for k, v in (metadata or {}).items()}


class _WithViolations(M3Error):
    def __init__(
        self,
        message: str,
        *,
        field_violations: Sequence[FieldViolation] = (),
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.field_violations: tuple[FieldViolation, ...] = tuple(field_violations)

    def __str__(self) -> str:
        if not self.field_violations:
            return self.message
        details = "; ".join(f"{v.field}: {v.description}" for v in self.field_violations)
        return f"{self.message} ({details})"


class ModelValidationError(_WithViolations):
    """A submission is invalid: bad human_input, plan with managed input, bad spec."""

    reason = "MODEL_VALIDATION_FAILED"


class ManagedInputValidationError(_WithViolations):
    """Malformed IDs, response maps, actions or schema content. Changes nothing."""

    reason = "MANAGED_INPUT_INVALID"


class ConflictKind(enum.StrEnum):
    STALE_LEASE = "stale_lease"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    CONCURRENT_UPDATE = "concurrent_update"
    REQUEST_ID_REUSED = "request_id_reused"


class ManagedInputConflict(M3Error):
    """Stale ownership, an idempotency conflict or a concurrent update."""

    reason = "MANAGED_INPUT_CONFLICT"

    def __init__(
        self,
        message: str,
        *,
        conflict_kind: ConflictKind,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            message, metadata={**(metadata or {}), "conflict_kind": conflict_kind.value}
        )
        self.conflict_kind = conflict_kind


class TransactionConflict(ManagedInputConflict):
    """Lock contention: the transaction was rolled back whole (a PostgreSQL deadlock or
    serialization victim, an SQLite lock held past the busy timeout), so running it
    again is safe. A caller sees it as any ManagedInputConflict (ABORTED, retry)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, conflict_kind=ConflictKind.CONCURRENT_UPDATE)


class ManagedInputStateError(M3Error):
    """The transition or response is invalid for the round's current state."""

    reason = "MANAGED_INPUT_STATE_INVALID"


class RoundNotFoundError(ManagedInputStateError):
    """No round with that ID exists."""

    reason = "ROUND_NOT_FOUND"


class ManagedInputRecoveryError(M3Error):
    """The store cannot safely recover or reclaim a round."""

    reason = "MANAGED_INPUT_RECOVERY_UNAVAILABLE"


class OperationTimeout(M3Error):
    """An operation (or a round's deadline) ran out of time."""

    reason = "OPERATION_TIMEOUT"


class ExecutionNotFoundError(M3Error):
    """No execution with that ID exists."""

    reason = "EXECUTION_NOT_FOUND"


class ResultWaitTimeout(OperationTimeout, TimeoutError):
    """`result(timeout=...)` ran out before the execution finished (it keeps running)."""

    reason = "RESULT_WAIT_TIMEOUT"


class ElicitationNotAnsweredError(M3Error):
    """With human_input="fail", an elicitation that no plan rule answers fails its operation."""

    reason = "ELICITATION_NOT_ANSWERED"


class RoundLimitExceededError(M3Error):
    """An operation asked for more input rounds than its round_limit allows."""

    reason = "ROUND_LIMIT_EXCEEDED"


class _RetryAfter(M3Error):
    """An error whose call succeeds as is once `retry_after_seconds` have passed
    (google.rpc.RetryInfo on the wire)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after_seconds: float,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, metadata=metadata)
        self.retry_after_seconds = retry_after_seconds


class WorkQueueFullError(_RetryAfter):
    """Too many executions are queued; retry after `retry_after_seconds`."""

    reason = "WORK_QUEUE_FULL"


class RateLimitedError(_RetryAfter):
    """The caller's principal used up its rate limit for this method
    (RESOURCE_EXHAUSTED); nothing was done: retry after `retry_after_seconds`
    (the same request ID or idempotency key is still unused)."""

    reason = "RATE_LIMITED"


class ServerBindingNotFoundError(M3Error):
    """A submission names an MCP server binding the service does not configure."""

    reason = "SERVER_BINDING_NOT_FOUND"


class InternalError(M3Error):
    """The service failed unexpectedly (INTERNAL). The request may or may not have
    taken effect: retry idempotent calls, or calls with the same request ID or key."""

    reason = "INTERNAL"


class EncryptionKeyError(InternalError):
    """Stored responses cannot be encrypted or decrypted: their key is not
    configured, the key under that ID is wrong, or the configured keys are
    malformed. On the wire it is INTERNAL (reason INTERNAL); `metadata` names
    the key ID (never a key) and the round when one is concerned."""


class ServiceShuttingDownError(M3Error):
    """The service is shutting down and ended a long-lived call (WatchPending):
    reconnect and resume with the cursor of the last event processed."""

    reason = "SERVICE_SHUTTING_DOWN"


class UnauthenticatedError(M3Error):
    """The call carried no credentials, or ones the service does not accept
    (UNAUTHENTICATED). `metadata["credentials"]` is `missing` or `invalid`."""

    reason = "UNAUTHENTICATED"


class StorageUnavailableError(_RetryAfter):
    """The database failed the request: unreachable, restarting, full, or it refused
    the commit (UNAVAILABLE). Nothing of the request was written; retry after
    `retry_after_seconds` (with the same request ID or idempotency key)."""

    reason = "STORAGE_UNAVAILABLE"

    def __init__(
        self,
        message: str,
        *,
        retry_after_seconds: float = 1.0,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, retry_after_seconds=retry_after_seconds, metadata=metadata)
