"""Tool output schemas are compiled once per process, not once per MCP session.

The SDK checks a tool's output schema against its metaschema and compiles it in
every session; M3 opens a session per execution, so the sessions share the
compiled validator (`m3grpc/harness/mcp_tasks.py`). What the SDK promised stays:
content is validated against the schema, an invalid schema fails every time.
"""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema.exceptions import SchemaError

from m3grpc.harness.mcp_tasks import TaskAwareSession, _compiled_output_schema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"result": {"type": "string"}},
    "required": ["result"],
}


def validator(schema: dict[str, Any]) -> Any:
    # The session method reads no session state; the SDK calls it per tool result.
    session = object.__new__(TaskAwareSession)
    return session._output_schema_validator("book", schema)


def test_equal_schemas_share_one_compiled_validator() -> None:
    reordered = {"required": ["result"], "properties": {"result": {"type": "string"}}}
    reordered["type"] = "object"

    first, second = validator(SCHEMA), validator(reordered)

    assert first is second
    assert first is not validator({**SCHEMA, "required": []})


def test_the_shared_validator_still_checks_content() -> None:
    compiled = validator(SCHEMA)

    assert list(compiled.iter_errors({"result": "booked"})) == []
    assert [e.message for e in compiled.iter_errors({"result": 3})] == ["3 is not of type 'string'"]


def test_an_invalid_schema_fails_every_time() -> None:
    invalid = {"type": "no-such-type"}
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Invalid schema for tool book"):
            validator(invalid)
    with pytest.raises(SchemaError):
        _compiled_output_schema('{"type": "no-such-type"}')
