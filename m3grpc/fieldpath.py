"""The one spelling of a field path in a field violation (`google.rpc.BadRequest`).

A path is a field name, then `.name` for a field (or a JSON property) inside
it, `[3]` for an element of a list, and `['key']` for a map entry: e.g.
`responses['shipping_address'].content.city`, `agent.script[0].kind`. Map
keys are always quoted with single quotes, `\\` and `'` escaped with a
backslash; a JSON property that is not an identifier is written like a map
key (`content['first name']`).

`parse` also reads the older spellings (`responses[key]`, Python reprs such as
`responses["it's"]`, `script.0.name`), so paths built anywhere can be brought
to this one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from m3grpc.text import UNSENDABLE

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ESCAPED_CHARACTER = re.compile(r"u([0-9a-f]{4})")


@dataclass(frozen=True)
class Name:
    """A field name (or a JSON property name)."""

    value: str


@dataclass(frozen=True)
class Index:
    """A list element."""

    value: int


@dataclass(frozen=True)
class Key:
    """A map entry (or a JSON property that is not an identifier)."""

    value: str


Segment = Name | Index | Key


def key(value: str) -> str:
    """`['value']`: a map key as a path segment. A NUL or a lone surrogate in the key
    is written `\\uXXXX`: a path travels in errors as JSON and protobuf text, which
    cannot carry a lone surrogate (`m3grpc.text`)."""
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    escaped = UNSENDABLE.sub(lambda found: f"\\u{ord(found.group()):04x}", escaped)
    return f"['{escaped}']"


def member(name: str) -> str:
    """`.name` for an identifier, else `['name']`: a JSON property as a path segment."""
    return f".{name}" if _IDENTIFIER.match(name) else key(name)


def join(segments: list[Segment]) -> str:
    text = ""
    for segment in segments:
        if isinstance(segment, Index):
            text += f"[{segment.value}]"
        elif isinstance(segment, Key) or not _IDENTIFIER.match(segment.value):
            text += key(segment.value)
        else:
            text += f".{segment.value}" if text else segment.value
    return text


def parse(path: str) -> list[Segment]:
    """The segments of a path in this module's spelling or an older one."""
    segments: list[Segment] = []
    position = 0
    while position < len(path):
        char = path[position]
        if char == ".":
            position += 1
            continue
        if char == "[":
            segment, position = _bracket(path, position)
            segments.append(segment)
            continue
        end = position
        while end < len(path) and path[end] not in ".[":
            end += 1
        segments.append(Name(path[position:end]))
        position = end
    return segments


def _bracket(path: str, start: int) -> tuple[Segment, int]:
    """The segment of the `[...]` at `start`, and the position after it."""
    opening = path[start + 1 : start + 2]
    if opening in ("'", '"'):
        value = ""
        position = start + 2
        while position < len(path) and path[position] != opening:
            if path[position] == "\\" and position + 1 < len(path):
                position += 1
                escaped = _ESCAPED_CHARACTER.match(path, position)
                if escaped is not None:  # `key`'s \uXXXX
                    value += chr(int(escaped.group(1), 16))
                    position = escaped.end()
                    continue
            value += path[position]
            position += 1
        if path[position + 1 : position + 2] == "]":
            return Key(value), position + 2
    end = path.find("]", start)
    if end < 0:
        return Key(path[start + 1 :]), len(path)
    inner = path[start + 1 : end]
    if inner.isdigit() and inner.isascii():
        return Index(int(inner)), end + 1
    return Key(inner), end + 1
