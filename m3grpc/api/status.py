"""Typed M3 errors -> `google.rpc.Status` with details (AIP-193).

Every error a client sees is a `google.rpc.Status` built with grpcio-status.
Its details carry one `google.rpc.ErrorInfo` (domain `m3grpc.dev`, reason =
the error's `reason`, metadata = the error's `metadata`) plus the details
below. The status message is the error's message (field violations travel in
`BadRequest`, not in the message). The most specific class wins
(`RoundNotFoundError` before `ManagedInputStateError`, `ResultWaitTimeout`
before `OperationTimeout`).

| Python exception               | ErrorInfo reason                   | gRPC code           | other details          |
|--------------------------------|------------------------------------|---------------------|------------------------|
| ModelValidationError           | MODEL_VALIDATION_FAILED            | INVALID_ARGUMENT    | BadRequest             |
| ManagedInputValidationError    | MANAGED_INPUT_INVALID              | INVALID_ARGUMENT    | BadRequest             |
| ManagedInputConflict           | MANAGED_INPUT_CONFLICT             | ABORTED             | -                      |
| RoundNotFoundError             | ROUND_NOT_FOUND                    | NOT_FOUND           | ResourceInfo           |
| ManagedInputStateError         | MANAGED_INPUT_STATE_INVALID        | FAILED_PRECONDITION | PreconditionFailure    |
| ManagedInputRecoveryError      | MANAGED_INPUT_RECOVERY_UNAVAILABLE | FAILED_PRECONDITION | PreconditionFailure    |
| ResultWaitTimeout              | RESULT_WAIT_TIMEOUT                | DEADLINE_EXCEEDED   | -                      |
| OperationTimeout               | OPERATION_TIMEOUT                  | DEADLINE_EXCEEDED   | -                      |
| ExecutionNotFoundError         | EXECUTION_NOT_FOUND                | NOT_FOUND           | ResourceInfo           |
| ServerBindingNotFoundError     | SERVER_BINDING_NOT_FOUND           | NOT_FOUND           | ResourceInfo           |
| WorkQueueFullError             | WORK_QUEUE_FULL                    | RESOURCE_EXHAUSTED  | RetryInfo              |
| ElicitationNotAnsweredError    | ELICITATION_NOT_ANSWERED           | FAILED_PRECONDITION | -                      |
| RoundLimitExceededError        | ROUND_LIMIT_EXCEEDED               | FAILED_PRECONDITION | -                      |
| (server shutting down: watch)  | SERVICE_SHUTTING_DOWN              | UNAVAILABLE         | -                      |
| any other exception            | INTERNAL                           | INTERNAL            | - (generic message)    |

ResourceInfo types: `m3grpc.dev/ElicitationRound`, `m3grpc.dev/Execution`,
`m3grpc.dev/ServerBinding`; resource_name is the ID or binding name.
PreconditionFailure has one violation: type = the reason, subject = the round
ID (else the execution ID), description = the message. RetryInfo.retry_delay
is the error's `retry_after_seconds`. An unexpected exception is logged with
its traceback on the server; the client gets only "internal error".

The status travels in the response trailers, which fail the whole call (no
ErrorInfo, RESOURCE_EXHAUSTED on the client) past a few KiB. So every text is
bounded here, whatever the error carries: the message to 300 characters,
metadata values to 80 (at most 16 keys), at most 10 field violations with
fields to 160 and descriptions to 240 characters. A cut text ends with
`...(N chars)`.
"""  # noqa: E501

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, message
from google.rpc import code_pb2, error_details_pb2, status_pb2

from m3grpc.api import convert
from m3grpc.errors import (
    ERROR_DOMAIN,
    ElicitationNotAnsweredError,
    ExecutionNotFoundError,
    M3Error,
    ManagedInputConflict,
    ManagedInputRecoveryError,
    ManagedInputStateError,
    ManagedInputValidationError,
    ModelValidationError,
    OperationTimeout,
    ResultWaitTimeout,
    RoundLimitExceededError,
    RoundNotFoundError,
    ServerBindingNotFoundError,
    WorkQueueFullError,
)
from m3grpc.runtime.limits import ECHO_CHARS, clip

log = logging.getLogger(__name__)

_MESSAGE_CHARS = 300
_METADATA_KEYS = 16
_VIOLATIONS = 10
_FIELD_CHARS = 160
_DESCRIPTION_CHARS = 240

INTERNAL_REASON = "INTERNAL"
SHUTTING_DOWN_REASON = "SERVICE_SHUTTING_DOWN"


@dataclass(frozen=True)
class _Resource:
    type: str
    metadata_key: str


# One Python type -> one status code. Looked up along the exception's MRO, so a
# subclass listed here wins over its base.
_CODES: dict[type[M3Error], grpc.StatusCode] = {
    ModelValidationError: grpc.StatusCode.INVALID_ARGUMENT,
    ManagedInputValidationError: grpc.StatusCode.INVALID_ARGUMENT,
    ManagedInputConflict: grpc.StatusCode.ABORTED,
    RoundNotFoundError: grpc.StatusCode.NOT_FOUND,
    ManagedInputStateError: grpc.StatusCode.FAILED_PRECONDITION,
    ManagedInputRecoveryError: grpc.StatusCode.FAILED_PRECONDITION,
    ResultWaitTimeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    OperationTimeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    ExecutionNotFoundError: grpc.StatusCode.NOT_FOUND,
    ServerBindingNotFoundError: grpc.StatusCode.NOT_FOUND,
    WorkQueueFullError: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ElicitationNotAnsweredError: grpc.StatusCode.FAILED_PRECONDITION,
    RoundLimitExceededError: grpc.StatusCode.FAILED_PRECONDITION,
}

_RESOURCES: dict[type[M3Error], _Resource] = {
    RoundNotFoundError: _Resource("m3grpc.dev/ElicitationRound", "round_id"),
    ExecutionNotFoundError: _Resource("m3grpc.dev/Execution", "execution_id"),
    ServerBindingNotFoundError: _Resource("m3grpc.dev/ServerBinding", "server"),
}


def code_for(error: M3Error) -> grpc.StatusCode | None:
    """The status code of a typed error, or None when its class is not mapped."""
    for cls in type(error).__mro__:
        if cls in _CODES:
            return _CODES[cls]
    return None


def status_for(error: BaseException) -> status_pb2.Status:
    """The google.rpc.Status sent for `error` (INTERNAL for anything unmapped)."""
    code = code_for(error) if isinstance(error, M3Error) else None
    if code is None or not isinstance(error, M3Error):
        return internal_status()
    metadata = {
        clip(key, ECHO_CHARS): clip(value, ECHO_CHARS)
        for key, value in list(error.metadata.items())[:_METADATA_KEYS]
    }
    details: list[message.Message] = [
        error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=metadata)
    ]
    details.extend(_extra_details(error))
    return _status(code, clip(error.message, _MESSAGE_CHARS), details)


def internal_status() -> status_pb2.Status:
    return _status(
        grpc.StatusCode.INTERNAL,
        "internal error",
        [error_details_pb2.ErrorInfo(reason=INTERNAL_REASON, domain=ERROR_DOMAIN)],
    )


def shutting_down_status() -> status_pb2.Status:
    return _status(
        grpc.StatusCode.UNAVAILABLE,
        "the service is shutting down; reconnect and resume with the last cursor",
        [error_details_pb2.ErrorInfo(reason=SHUTTING_DOWN_REASON, domain=ERROR_DOMAIN)],
    )


def _extra_details(error: M3Error) -> list[message.Message]:
    text = clip(error.message, _MESSAGE_CHARS)
    if isinstance(error, ModelValidationError | ManagedInputValidationError):
        violations = [
            error_details_pb2.BadRequest.FieldViolation(
                field=clip(violation.field, _FIELD_CHARS),
                description=clip(violation.description, _DESCRIPTION_CHARS),
            )
            for violation in error.field_violations[:_VIOLATIONS]
        ]
        if len(error.field_violations) > _VIOLATIONS:
            more = len(error.field_violations) - _VIOLATIONS
            violations[-1].description = clip(
                f"{violations[-1].description} (and {more} more violations)", _DESCRIPTION_CHARS
            )
        return [error_details_pb2.BadRequest(field_violations=violations)]
    for cls in type(error).__mro__:
        resource = _RESOURCES.get(cls)
        if resource is not None:
            return [
                error_details_pb2.ResourceInfo(
                    resource_type=resource.type,
                    resource_name=clip(error.metadata.get(resource.metadata_key, "")),
                    description=text,
                )
            ]
    if isinstance(error, ManagedInputStateError | ManagedInputRecoveryError):
        subject = error.metadata.get("round_id") or error.metadata.get("execution_id", "")
        return [
            error_details_pb2.PreconditionFailure(
                violations=[
                    error_details_pb2.PreconditionFailure.Violation(
                        type=error.reason, subject=clip(subject), description=text
                    )
                ]
            )
        ]
    if isinstance(error, WorkQueueFullError):
        return [
            error_details_pb2.RetryInfo(retry_delay=convert.duration(error.retry_after_seconds))
        ]
    return []


def _status(code: grpc.StatusCode, text: str, details: list[message.Message]) -> status_pb2.Status:
    packed = []
    for detail in details:
        holder = any_pb2.Any()
        holder.Pack(detail)
        packed.append(holder)
    number = getattr(code_pb2, code.name)
    return status_pb2.Status(code=number, message=text, details=packed)


def log_unexpected(method: str, error: BaseException) -> None:
    log.error("unexpected error in %s", method, exc_info=error)
