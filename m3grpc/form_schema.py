"""The shapes MCP form elicitation allows, checked where M3 meets them.

MCP restricts a form's `requestedSchema` to an object of top-level primitive
properties (string, number, integer, boolean, or an array of strings for
multi-select), and an `ElicitResult`'s content to a flat mapping of strings,
numbers, booleans, null and string arrays. Anything else cannot be delivered
to the server, so M3 refuses such a request when it arrives (the operation
fails `invalid_elicitation_schema`) and never acknowledges such content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from m3grpc.text import text_problem

_PRIMITIVE_TYPES = frozenset({"string", "number", "integer", "boolean"})
_ALLOWED = (
    "MCP form elicitation allows only string, number, integer, boolean and string-array properties"
)


def form_schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why MCP does not allow `schema` as a form's requestedSchema, or None if it does."""
    if schema.get("type") != "object":
        return f'the requested schema must have type "object", not {schema.get("type")!r}'
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return "the requested schema's properties must be an object"
    for name, prop in properties.items():
        problem = _property_problem(prop)
        if problem is not None:
            return f"property {name!r} {problem}: {_ALLOWED}"
    return None


def _property_problem(prop: object) -> str | None:
    if not isinstance(prop, Mapping):
        return "is not a schema object"
    kind = prop.get("type")
    if isinstance(kind, str) and kind in _PRIMITIVE_TYPES and "properties" not in prop:
        return None
    if kind == "array":
        items = prop.get("items")
        # Multi-select: items are strings (an `enum`, or `anyOf` of titled consts).
        if isinstance(items, Mapping) and items.get("type", "string") == "string":
            return None
        return "is an array whose items are not strings"
    if kind is None:
        return "has no type"
    return f"has type {kind!r}"


def form_content_problems(content: Mapping[str, Any]) -> dict[str, str]:
    """The content keys whose values an MCP `ElicitResult` cannot carry, with why:
    a value that is not flat, or a key or string that is not sendable text
    (`m3grpc.text`)."""
    problems: dict[str, str] = {}
    for key, value in content.items():
        if not _deliverable(value):
            problems[str(key)] = (
                "must be a string, number, boolean, null or array of strings "
                "(MCP form content is flat)"
            )
        elif problem := _text_problem(key, value):
            problems[str(key)] = problem
    return problems


def _text_problem(key: object, value: object) -> str | None:
    if isinstance(key, str) and (problem := text_problem(key)):
        return f"its name {problem}"
    strings = value if isinstance(value, list | tuple) else [value]
    for item in strings:
        if isinstance(item, str) and (problem := text_problem(item)):
            return problem
    return None


def _deliverable(value: object) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    return isinstance(value, list | tuple) and all(isinstance(item, str) for item in value)
