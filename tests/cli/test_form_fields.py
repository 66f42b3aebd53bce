"""What `respond --interactive` accepts for each kind of MCP form field, and in
which order it asks (a schema arrives as a protobuf Struct, which keeps no order)."""

from __future__ import annotations

from typing import Any

import pytest

from m3grpc.cli_remote.form_fields import FormField, form_fields

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "zeta": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
        "email": {"type": "string", "format": "email", "title": "E-mail"},
        "size": {
            "type": "string",
            "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
        },
        "legacy": {"type": "string", "enum": ["a", "b"], "enumNames": ["Alpha", "Beta"]},
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["x", "y", "z"]},
            "minItems": 1,
            "maxItems": 2,
        },
        "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "count": {"type": "integer", "minimum": 1, "default": 2},
        "ok": {"type": "boolean"},
    },
    "required": ["ratio", "email"],
}


def _fields() -> dict[str, FormField]:
    return {field.name: field for field in form_fields(SCHEMA)}


def test_required_fields_first_in_their_order_then_the_rest_by_name() -> None:
    names = [field.name for field in form_fields(SCHEMA)]
    assert names == ["ratio", "email", "count", "legacy", "ok", "size", "tags", "zeta"]
    assert [f.name for f in form_fields({"properties": {"b": {}}, "required": "b"})] == ["b"]


def test_summaries_tell_type_requirement_bounds_and_default() -> None:
    fields = _fields()
    assert fields["ratio"].summary() == "number, required, > 0, <= 1"
    assert fields["email"].summary() == "string, required, format email"
    assert fields["count"].summary() == "integer, optional, >= 1, default 2"
    assert fields["tags"].summary() == "array of strings, optional, min items 1, max items 2"
    assert fields["zeta"].summary() == (
        "string, optional, min length 2, max length 4, pattern ^[a-z]+$"
    )


@pytest.mark.parametrize(
    ("name", "typed", "value"),
    [
        ("ratio", "0.25", 0.25),
        ("ratio", "1", 1),
        ("count", " 7 ", 7),
        ("ok", "Yes", True),
        ("ok", "n", False),
        ("size", "2", "l"),
        ("size", "Small", "s"),
        ("size", "l", "l"),
        ("legacy", "Beta", "b"),
        ("tags", "x, 3", ["x", "z"]),
        ("zeta", "abc", "abc"),
        ("email", "someone@example.com", "someone@example.com"),
    ],
)
def test_values_are_parsed_by_type(name: str, typed: str, value: Any) -> None:
    parsed = _fields()[name].parse(typed)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    ("name", "typed", "why"),
    [
        ("ratio", "0", "must be > 0"),
        ("ratio", "1.5", "must be <= 1"),
        ("ratio", "nan", "must be a finite number"),
        ("ratio", "half", "must be a number"),
        ("count", "2.5", "must be a whole number"),
        ("count", "0", "must be >= 1"),
        ("ok", "maybe", "answer y or n"),
        ("size", "3", "choose one of s, l (or its number)"),
        ("tags", "x, y, z", "choose at most 2"),
        ("tags", "w", "choose one of x, y, z (or its number)"),
        ("zeta", "a", "at least 2 characters"),
        ("zeta", "abcde", "at most 4 characters"),
        ("zeta", "AB", "must match ^[a-z]+$"),
    ],
)
def test_values_that_do_not_fit_are_refused_with_a_reason(name: str, typed: str, why: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        _fields()[name].parse(typed)
    assert str(refused.value) == why
