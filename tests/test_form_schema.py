"""The MCP form shapes M3 refuses or accepts (m3grpc.form_schema)."""

from __future__ import annotations

from typing import Any

import pytest

from m3grpc.form_schema import form_content_problems, form_schema_problem

ALLOWED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "format": "email"},
        "age": {"type": "integer", "minimum": 0},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "color": {"type": "string", "oneOf": [{"const": "r", "title": "Red"}]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "fish": {"type": "array", "items": {"anyOf": [{"const": "f1", "title": "Tuna"}]}},
    },
}


def test_flat_primitive_schemas_are_allowed() -> None:
    assert form_schema_problem(ALLOWED) is None
    assert form_schema_problem({"type": "object"}) is None  # a bare confirmation


@pytest.mark.parametrize(
    ("prop", "problem"),
    [
        ({"type": "object", "properties": {"street": {"type": "string"}}}, "has type 'object'"),
        ({"type": "array", "items": {"type": "object"}}, "is an array whose items are not strings"),
        ({"type": "array"}, "is an array whose items are not strings"),
        ({"enum": ["a"]}, "has no type"),
        ({"type": ["string", "null"]}, "has type ['string', 'null']"),
        ("string", "is not a schema object"),
    ],
)
def test_a_property_mcp_does_not_allow_is_named(prop: object, problem: str) -> None:
    message = form_schema_problem({"type": "object", "properties": {"address": prop}})
    assert message is not None
    assert message.startswith(f"property 'address' {problem}")


def test_the_schema_must_be_an_object() -> None:
    assert form_schema_problem({"type": "string"}) is not None
    assert form_schema_problem({"type": "object", "properties": []}) is not None


def test_only_flat_content_is_deliverable() -> None:
    content = {"a": "x", "b": 1, "c": 1.5, "d": True, "e": None, "f": ["x", "y"]}
    assert form_content_problems(content) == {}
    bad = form_content_problems({"a": {"nested": 1}, "b": [1, 2], "c": "ok"})
    assert sorted(bad) == ["a", "b"]


def test_content_text_must_be_storable_and_sendable() -> None:
    # A NUL (no PostgreSQL text holds one) or a lone surrogate (no UTF-8 encodes one)
    # in a value, an array item or a property name.
    bad = form_content_problems(
        {"a": "x\x00y", "b": ["ok", "\ud800"], "c\udfff": "ok", "d": "fine", "e": ["é"]}
    )
    assert sorted(bad) == ["a", "b", "c\udfff"]
    assert "NUL" in bad["a"]
    assert "surrogate" in bad["b"]
    assert bad["c\udfff"].startswith("its name ")
