"""The fields of an MCP form schema, described and parsed for a person at a terminal.

MCP form schemas are flat: string (with `enum`, `oneOf`/`anyOf` titled consts or
the legacy `enumNames`, and formats), number, integer, boolean, and arrays of
strings (multi-select). `parse` checks what can be checked here (type, choices,
bounds, lengths, pattern); the service validates the whole answer again
(jsonschema with format checks) and reports field violations.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_MISSING: Any = object()
_YES = {"y", "yes", "true", "t", "1"}
_NO = {"n", "no", "false", "f", "0"}


@dataclass(frozen=True)
class Choice:
    value: str
    label: str


@dataclass(frozen=True)
class FormField:
    name: str
    kind: str  # string, number, integer, boolean, array (of strings)
    required: bool
    schema: Mapping[str, Any]
    choices: tuple[Choice, ...] = field(default=())

    @property
    def title(self) -> str | None:
        title = self.schema.get("title")
        return title if isinstance(title, str) else None

    @property
    def description(self) -> str | None:
        text = self.schema.get("description")
        return text if isinstance(text, str) else None

    @property
    def has_default(self) -> bool:
        return "default" in self.schema

    @property
    def default(self) -> Any:
        return self.schema.get("default")

    def summary(self) -> str:
        """`string, required, format email`: the type and what constrains it."""
        parts = [f"{self.kind} of strings" if self.kind == "array" else self.kind]
        parts.append("required" if self.required else "optional")
        fmt = self.schema.get("format")
        if isinstance(fmt, str):
            parts.append(f"format {fmt}")
        for key, word in (
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
        ):
            if key in self.schema:
                parts.append(f"{word} {self.schema[key]}")
        for key, word in (
            ("minLength", "min length"),
            ("maxLength", "max length"),
            ("minItems", "min items"),
            ("maxItems", "max items"),
            ("pattern", "pattern"),
        ):
            if key in self.schema:
                parts.append(f"{word} {self.schema[key]}")
        if self.has_default:
            parts.append(f"default {format_value(self.default)}")
        return ", ".join(parts)

    def parse(self, text: str) -> Any:
        """The value typed as `text`; ValueError with a short reason when it does not fit."""
        text = text.strip()
        if self.kind == "boolean":
            return _boolean(text)
        if self.kind == "integer":
            return self._bounded(_integer(text))
        if self.kind == "number":
            return self._bounded(_number(text))
        if self.kind == "array":
            return self._items([item.strip() for item in text.split(",") if item.strip()])
        return self._string(text)

    # -- checks ----------------------------------------------------------------------

    def _choice(self, text: str) -> str:
        if text.isdigit() and 1 <= int(text) <= len(self.choices):
            return self.choices[int(text) - 1].value
        for choice in self.choices:
            if text in (choice.value, choice.label):
                return choice.value
        names = ", ".join(choice.value for choice in self.choices)
        raise ValueError(f"choose one of {names} (or its number)")

    def _string(self, text: str) -> str:
        if self.choices:
            return self._choice(text)
        low, high = self.schema.get("minLength"), self.schema.get("maxLength")
        if isinstance(low, int) and len(text) < low:
            raise ValueError(f"at least {low} characters")
        if isinstance(high, int) and len(text) > high:
            raise ValueError(f"at most {high} characters")
        pattern = self.schema.get("pattern")
        if isinstance(pattern, str):
            try:
                matched = re.search(pattern, text) is not None
            except re.error:
                matched = True  # a pattern Python cannot read: the service checks it
            if not matched:
                raise ValueError(f"must match {pattern}")
        return text

    def _bounded(self, number: float) -> float:
        schema = self.schema
        if "minimum" in schema and number < schema["minimum"]:
            raise ValueError(f"must be >= {schema['minimum']}")
        if "exclusiveMinimum" in schema and number <= schema["exclusiveMinimum"]:
            raise ValueError(f"must be > {schema['exclusiveMinimum']}")
        if "maximum" in schema and number > schema["maximum"]:
            raise ValueError(f"must be <= {schema['maximum']}")
        if "exclusiveMaximum" in schema and number >= schema["exclusiveMaximum"]:
            raise ValueError(f"must be < {schema['exclusiveMaximum']}")
        return number

    def _items(self, items: Sequence[str]) -> list[str]:
        values = [self._choice(item) for item in items] if self.choices else list(items)
        low, high = self.schema.get("minItems"), self.schema.get("maxItems")
        if isinstance(low, int) and len(values) < low:
            raise ValueError(f"choose at least {low}")
        if isinstance(high, int) and len(values) > high:
            raise ValueError(f"choose at most {high}")
        return values


def form_fields(schema: Mapping[str, Any]) -> list[FormField]:
    """The fields of a form's requested schema: required ones first (in `required`
    order), then the others by name."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    required = schema.get("required")
    listed = required if isinstance(required, list) else []
    required_names = [name for name in listed if name in properties]
    names = set(required_names)
    # The schema arrives as a protobuf Struct, which keeps no key order: required
    # fields come first in the order `required` lists them, then the rest by name.
    ordered = [*required_names, *sorted(name for name in properties if name not in names)]
    fields: list[FormField] = []
    for name in ordered:
        prop = properties[name]
        if not isinstance(prop, Mapping):
            continue
        kind = prop.get("type")
        kind = kind if kind in ("string", "number", "integer", "boolean", "array") else "string"
        source = prop.get("items") if kind == "array" else prop
        choices = _choices(source) if isinstance(source, Mapping) else ()
        fields.append(FormField(str(name), kind, name in names, prop, choices))
    return fields


def _choices(schema: Mapping[str, Any]) -> tuple[Choice, ...]:
    enum = schema.get("enum")
    if isinstance(enum, list):
        labels = schema.get("enumNames")
        if isinstance(labels, list) and len(labels) == len(enum):
            return tuple(Choice(str(v), str(label)) for v, label in zip(enum, labels, strict=True))
        return tuple(Choice(str(value), str(value)) for value in enum)
    options = schema.get("oneOf", schema.get("anyOf"))
    if isinstance(options, list):
        found = [
            Choice(str(option["const"]), str(option.get("title", option["const"])))
            for option in options
            if isinstance(option, Mapping) and "const" in option
        ]
        return tuple(found)
    return ()


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in _YES:
        return True
    if lowered in _NO:
        return False
    raise ValueError("answer y or n")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("must be a whole number") from None


def _number(text: str) -> float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        raise ValueError("must be a number") from None
    if not math.isfinite(number):
        raise ValueError("must be a finite number")
    return number


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)
