"""The contract check of field-violation paths, written independently of the
server's mapper: parse a path in the one documented spelling
(error_reason.proto) and walk it along the request message's descriptor.

    name ( '.' name | '[' digits ']' | "['" key "']" )*

A name must be a field (or a oneof) of the message reached so far; `[i]`
follows a repeated field, `['key']` a map field; after a
`google.protobuf.Struct`/`Value`/`ListValue` field the rest is JSON content.
"""

from __future__ import annotations

import re

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_TOKEN = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|\.(?P<member>[A-Za-z_][A-Za-z0-9_]*)"
    r"|\[(?P<index>\d+)\]"
    r"|\['(?P<key>(?:[^'\\]|\\.)*)'\]",
    re.DOTALL,
)
_JSON = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}


def tokens(path: str) -> list[tuple[str, str]]:
    """(kind, value) pairs; AssertionError when the path is not in the one spelling."""
    found: list[tuple[str, str]] = []
    position = 0
    while position < len(path):
        match = _TOKEN.match(path, position)
        assert match is not None, f"{path!r}: unreadable at {position}"
        kind = match.lastgroup
        assert kind is not None
        if kind == "name":
            assert position == 0, f"{path!r}: a name must follow a dot"
        value = match.group(kind)
        if kind == "key":
            value = re.sub(r"\\(.)", r"\1", value, flags=re.DOTALL)
        found.append(("name" if kind == "member" else kind, value))
        position = match.end()
    assert found and found[0][0] == "name", f"{path!r}: must start with a field name"
    return found


def assert_request_path(request: Descriptor, path: str) -> None:
    """AssertionError unless `path` names a field of the `request` message."""
    parts = tokens(path)
    message: Descriptor | None = request
    container: FieldDescriptor | None = None  # a repeated or map field awaiting [..]
    for position, (kind, value) in enumerate(parts):
        if message is not None and message.full_name in _JSON:
            return  # JSON content: any members and indexes
        if container is not None:
            is_map = container.message_type is not None and (
                container.message_type.GetOptions().map_entry
            )
            if is_map and kind == "key":
                value_field = container.message_type.fields_by_name["value"]
                message, container = value_field.message_type, None
                continue
            if not is_map and kind == "index":
                message, container = container.message_type, None
                continue
            raise AssertionError(f"{path!r}: {kind} {value!r} after {container.name}")
        assert kind == "name", f"{path!r}: {kind} {value!r} after a non-repeated field"
        assert message is not None, f"{path!r}: {value!r} inside a scalar field"
        if value in message.oneofs_by_name and position == len(parts) - 1:
            return
        assert value in message.fields_by_name, f"{path!r}: {message.full_name} has no {value!r}"
        field = message.fields_by_name[value]
        if field.is_repeated:
            container, message = field, None
        else:
            message = field.message_type
