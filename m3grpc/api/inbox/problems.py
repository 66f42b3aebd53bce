"""A failed inbox call as JSON: the same status a gRPC client gets, readable by a page.

The error becomes the gRPC `google.rpc.Status` first (`status_for`: the same
clipping, the same request-path field violations), then that status becomes
`{"error": {"code", "reason", "message", "metadata", "field_violations"}}` with
an HTTP status of the same meaning.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import grpc
from google.protobuf import message
from google.rpc import code_pb2, error_details_pb2
from starlette.responses import JSONResponse

from m3grpc.api import request_paths
from m3grpc.errors import M3Error, ManagedInputValidationError, ModelValidationError
from m3grpc.wire.status import code_for, status_for

log = logging.getLogger(__name__)

_HTTP_STATUS = {
    code_pb2.INVALID_ARGUMENT: 400,
    code_pb2.UNAUTHENTICATED: 401,
    code_pb2.NOT_FOUND: 404,
    code_pb2.ABORTED: 409,
    code_pb2.FAILED_PRECONDITION: 409,
    code_pb2.RESOURCE_EXHAUSTED: 429,
    code_pb2.UNAVAILABLE: 503,
    code_pb2.DEADLINE_EXCEEDED: 504,
}


def error_response(error: BaseException, request: message.Message | None = None) -> JSONResponse:
    """`error` as JSON; field violations as paths into `request` when given."""
    if not (isinstance(error, M3Error) and code_for(error) is not None):
        log.error("unexpected error in the inbox", exc_info=error)
    if isinstance(error, ModelValidationError | ManagedInputValidationError) and request:
        error.field_violations = tuple(
            request_paths.violations_for(request, error.field_violations)
        )
    status = status_for(error)
    body: dict[str, Any] = {
        "code": _code_name(status.code),
        "reason": "",
        "message": status.message,
        "metadata": {},
        "field_violations": [],
    }
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(info):
            body["reason"] = info.reason
            body["metadata"] = dict(info.metadata)
        elif detail.Unpack(bad_request):
            body["field_violations"] = [
                {"field": v.field, "description": v.description}
                for v in bad_request.field_violations
            ]
    headers = {}
    if status.code == code_pb2.UNAUTHENTICATED:
        headers["WWW-Authenticate"] = "Bearer"
    retry_after = getattr(error, "retry_after_seconds", None)
    if isinstance(retry_after, float | int):
        headers["Retry-After"] = str(max(1, math.ceil(retry_after)))
    return JSONResponse(
        {"error": body}, status_code=_HTTP_STATUS.get(status.code, 500), headers=headers
    )


def _code_name(number: int) -> str:
    names: dict[int, str] = {code.value[0]: code.name for code in grpc.StatusCode}
    return names.get(number, "UNKNOWN")
