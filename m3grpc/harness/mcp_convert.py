"""Conversions between the MCP SDK's wire models and M3's domain types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult
from pydantic import BaseModel, ValidationError

from m3grpc.harness.base import OperationRef
from m3grpc.types import ElicitationResponse, FormElicitationRequest, UrlElicitationRequest

DomainRequest = FormElicitationRequest | UrlElicitationRequest


def domain_request(
    params: ElicitRequestParams, operation: OperationRef, *, fallback_elicitation_id: str
) -> DomainRequest:
    """The domain request for an SDK elicitation, with the operation's context filled in.

    2026-07-28 removed `elicitationId` from URL requests; `fallback_elicitation_id`
    (the request's key) stands in so the domain request stays complete.
    """
    context: dict[str, Any] = {
        "meta": dict(params.meta) if params.meta else None,
        "task": params.task.model_dump(mode="json", by_alias=True, exclude_none=True)
        if params.task is not None
        else None,
        "server": operation.server,
        "operation_kind": operation.operation_kind,
        "operation_name": operation.operation_name,
    }
    if isinstance(params, ElicitRequestURLParams):
        return UrlElicitationRequest(
            message=params.message,
            url=params.url,
            elicitation_id=params.elicitation_id or fallback_elicitation_id,
            **context,
        )
    return FormElicitationRequest(
        message=params.message, requested_schema=params.requested_schema, **context
    )


def elicit_result(response: ElicitationResponse, request: DomainRequest) -> ElicitResult:
    """The `ElicitResult` delivered to the server.

    Content travels only with a form `accept`: a URL accept records consent and
    nothing else (M3 never browses the URL), and decline/cancel carry nothing.

    Raises:
        pydantic.ValidationError: The content is not a flat MCP form value map.
    """
    if response.action == "accept" and isinstance(request, FormElicitationRequest):
        content = dict(response.content) if response.content is not None else None
        return ElicitResult(action="accept", content=content)
    return ElicitResult(action=response.action)


def elicit_results(
    requests: Mapping[str, DomainRequest], answers: Mapping[str, ElicitationResponse]
) -> dict[str, ElicitResult]:
    """A resolver's answers to a round's `requests`, as the `ElicitResult`s to deliver.

    Raises:
        ValueError: The answers do not match the request keys or are not valid
            responses (the message says which).
    """
    expected, got = set(requests), set(answers)
    if expected != got:
        raise ValueError(f"expected responses for {sorted(expected)}, got {sorted(got)}")
    try:
        return {
            key: elicit_result(ElicitationResponse.model_validate(answers[key]), request)
            for key, request in requests.items()
        }
    except ValidationError as exc:
        raise ValueError(f"invalid response: {exc}") from exc


def dump_result(result: BaseModel) -> Mapping[str, Any]:
    """A JSON-able dump of an MCP result, with wire (camelCase) field names."""
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
