"""Validation of a caller's responses against a pending round's requests.

Pure functions: they read the round's requests and return field violations,
so the store can reject bad input before it changes anything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, ValidationError

from m3grpc import fieldpath
from m3grpc.errors import FieldViolation, ManagedInputValidationError
from m3grpc.form_schema import form_content_problems
from m3grpc.types import (
    ElicitationRequest,
    ElicitationResponse,
    FormElicitationRequest,
    UrlElicitationRequest,
)

# The string formats MCP allows in elicitation schemas.
_FORMAT_CHECKER = FormatChecker(formats=["email", "uri", "date", "date-time"])


def coerce_responses(responses: object) -> dict[str, ElicitationResponse]:
    """Check the shape of a response map: string keys to ElicitationResponse values."""
    if not isinstance(responses, Mapping):
        raise ManagedInputValidationError(
            "responses must be a mapping of request key to ElicitationResponse",
            field_violations=[FieldViolation("responses", "must be a mapping")],
        )
    violations: list[FieldViolation] = []
    result: dict[str, ElicitationResponse] = {}
    for key, value in responses.items():
        if not isinstance(key, str) or not key:
            violations.append(FieldViolation("responses", f"key {key!r} is not a non-empty string"))
        elif not isinstance(value, ElicitationResponse):
            violations.append(
                FieldViolation("responses" + fieldpath.key(key), "must be an ElicitationResponse")
            )
        else:
            result[key] = value
    if violations:
        raise ManagedInputValidationError("malformed response map", field_violations=violations)
    return result


def validate_responses(
    requests: Mapping[str, ElicitationRequest],
    responses: Mapping[str, Mapping[str, Any]],
) -> None:
    """Raise ManagedInputValidationError unless `responses` (a response map's JSON
    form, `responses_document`: what is stored) answers exactly `requests`."""
    violations: list[FieldViolation] = []
    for key in sorted(set(requests) - set(responses)):
        violations.append(
            FieldViolation("responses" + fieldpath.key(key), "missing: the round requests it")
        )
    for key in sorted(set(responses) - set(requests)):
        violations.append(
            FieldViolation("responses" + fieldpath.key(key), "not a request key of this round")
        )
    for key in sorted(set(requests) & set(responses)):
        violations.extend(
            _validate_one("responses" + fieldpath.key(key), requests[key], responses[key])
        )
    if violations:
        raise ManagedInputValidationError(
            "the responses do not answer the pending round", field_violations=violations
        )


def _validate_one(
    path: str, request: ElicitationRequest, response: Mapping[str, Any]
) -> list[FieldViolation]:
    action, content = response["action"], response["content"]
    if action != "accept":
        if content is not None:
            return [FieldViolation(f"{path}.content", f"a {action} carries no content")]
        return []
    if isinstance(request, UrlElicitationRequest):
        if content is not None:
            return [
                FieldViolation(
                    f"{path}.content", "a URL-mode accept only records consent: no content"
                )
            ]
        return []
    assert isinstance(request, FormElicitationRequest)
    if content is None:
        return [FieldViolation(f"{path}.content", "a form accept requires mapping content")]
    validator = _validator_for(_canonical_json(request.requested_schema))
    if validator is None:
        return [FieldViolation(path, "the request's schema is not a valid JSON schema")]
    violations = [
        FieldViolation(_content_path(path, list(error.absolute_path)), _description(error))
        for error in sorted(validator.iter_errors(content), key=lambda e: list(e.absolute_path))
    ]
    # A schema may let nested values through (e.g. additionalProperties), but an
    # MCP ElicitResult cannot carry them: never acknowledge what cannot be delivered.
    violations.extend(
        FieldViolation(_content_path(path, [key]), problem)
        for key, problem in sorted(form_content_problems(content).items())
    )
    return violations


def _description(error: ValidationError) -> str:
    """What is wrong, never the value: answers may be secrets, and a violation
    travels to logs, traces and callers. jsonschema starts most messages with
    the value (`'x' is not one of [...]`): that part is dropped; a message that
    still shows a piece of the value is replaced by the constraint's name."""
    message = str(error.message)
    shown = repr(error.instance)
    if message.startswith(shown):
        message = message[len(shown) :].lstrip()
    if any(piece in message for piece in _pieces(error.instance)):
        return f"does not satisfy the schema's {error.validator!r} constraint"
    return message


def _pieces(value: Any) -> set[str]:
    """The value's scalar parts as a message could show them (mapping keys are
    names, not values, and may be named)."""
    if isinstance(value, Mapping):
        return {piece for item in value.values() for piece in _pieces(item)}
    if isinstance(value, list | tuple):
        return {piece for item in value for piece in _pieces(item)}
    if isinstance(value, str):
        return {value, repr(value)} if len(value) >= 3 else {repr(value)}
    return {repr(value)} if len(repr(value)) >= 2 and value is not None else set()


def _content_path(path: str, parts: list[Any]) -> str:
    text = f"{path}.content"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else fieldpath.member(str(part))
    return text


@lru_cache(maxsize=256)
def _validator_for(schema_json: str) -> Draft202012Validator | None:
    schema = json.loads(schema_json)
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return None
    return Draft202012Validator(schema, format_checker=_FORMAT_CHECKER)


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def responses_document(responses: Mapping[str, ElicitationResponse]) -> dict[str, Any]:
    """The JSON form of a response map, as stored."""
    return {key: value.model_dump(mode="json") for key, value in sorted(responses.items())}


def responses_digest(responses: Mapping[str, ElicitationResponse]) -> str:
    """A stable digest of a response map: same responses, same digest."""
    return document_digest(responses_document(responses))


def document_digest(document: Mapping[str, Any]) -> str:
    """`responses_digest` of a response map already in its JSON form."""
    return hashlib.sha256(_canonical_json(document).encode()).hexdigest()
