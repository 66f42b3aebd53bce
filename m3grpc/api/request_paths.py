"""Field violations as paths into the request message: the one place that maps
them, applied by `guard` to every validation error a handler raises.

Violations come from two places: the wire layer names request fields
(`agent.script[0].kind`), and the model layer (specs, submission checks, the
store's response validation) names model fields relative to the spec it
checked (`round_timeout_seconds`, `elicitation_plan.rules[0].content`). Both
are walked along the request's message descriptor: model names that differ
from the proto's are renamed (`_RENAMES`), a model path is tried under each
set oneof field of the request (SubmitRequest's `agent` or `operation`), and
segments the proto does not have are dropped (a binding's `server.command` is
`agent.server` on the wire). Inside a `google.protobuf.Struct` the rest of the
path is JSON (`responses['k'].content.city`). The result is spelled as
`m3grpc.fieldpath` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf import descriptor, message, struct_pb2

from m3grpc import fieldpath
from m3grpc.clipping import clip
from m3grpc.errors import FieldViolation
from m3grpc.fieldpath import Index, Key, Name, Segment

# (message full name, model field name) -> the proto field or oneof name.
_RENAMES: dict[tuple[str, str], str] = {
    ("m3.v1.AgentSpec", "round_timeout_seconds"): "round_timeout",
    ("m3.v1.OperationStep", "task_ttl_seconds"): "task_ttl",
    ("m3.v1.ElicitationRule", "action"): "answer",
    ("m3.v1.ElicitationRule", "content"): "accept_content",
    ("m3.v1.ElicitationRule", "use_schema_defaults"): "accept_defaults",
    # Managed input on a store that is not persistent: nothing on the wire can
    # change the store, so the request's choice of managed input is the field.
    ("m3.v1.SubmitRequest", "store"): "human_input",
}

# A map key or JSON name longer than this is cut (marked `...(N chars)`).
_MAX_SEGMENT_BYTES = 64

_JSON_TYPES = frozenset(
    {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
)


@dataclass(frozen=True)
class _Walk:
    segments: list[Segment]
    consumed: int  # how many input segments were accounted for
    complete: bool  # every input segment was accounted for


def violations_for(
    request: message.Message, violations: Sequence[FieldViolation]
) -> list[FieldViolation]:
    """The violations with their fields as request paths (see the module doc)."""
    roots = _roots(request)
    return [
        FieldViolation(request_path(request.DESCRIPTOR, v.field, roots), v.description)
        for v in violations
    ]


def request_path(request: descriptor.Descriptor, path: str, roots: Sequence[str] = ()) -> str:
    """`path` (a request path or a model path relative to one of `roots`) as a request path."""
    segments = fieldpath.parse(path)
    candidates = [_walk(request, segments)]
    candidates += [_walk(request, [Name(root), *segments], offset=1) for root in roots]
    complete = [walk for walk in candidates if walk.complete]
    if complete:
        return _join(complete[0].segments)
    best = max(candidates, key=lambda walk: (walk.consumed, len(walk.segments)))
    if best.segments:
        return _join(best.segments)
    return roots[0] if roots else clip(path, _MAX_SEGMENT_BYTES, unit="bytes")


def _join(segments: Sequence[Segment]) -> str:
    """The path; map keys and JSON names are cut short (a status must stay small)."""
    short: list[Segment] = []
    for segment in segments:
        if isinstance(segment, Key | Name) and len(segment.value.encode()) > _MAX_SEGMENT_BYTES:
            segment = Key(clip(segment.value, _MAX_SEGMENT_BYTES, unit="bytes"))
        short.append(segment)
    return fieldpath.join(short)


def _roots(request: message.Message) -> list[str]:
    """The set message fields of the request's oneofs: where model paths start."""
    roots = []
    for oneof in request.DESCRIPTOR.oneofs:
        name = request.WhichOneof(oneof.name)
        if name is not None and request.DESCRIPTOR.fields_by_name[name].message_type:
            roots.append(name)
    return roots


def _walk(
    message_type: descriptor.Descriptor, segments: Sequence[Segment], *, offset: int = 0
) -> _Walk:
    """Follow `segments` from `message_type`; `offset` leading segments were added."""
    out: list[Segment] = []
    current: descriptor.Descriptor | None = message_type
    field: descriptor.FieldDescriptor | None = None
    position = 0
    while position < len(segments):
        segment = segments[position]
        if current is not None and current.full_name in _JSON_TYPES:
            out.extend(_json(segments[position:]))
            return _Walk(out, len(segments) - offset, True)
        if field is not None and _is_repeated(field) and not _is_map(field) and _is_index(segment):
            out.append(Index(int(segment.value)))
            field = None  # now at the element
            position += 1
            continue
        if field is not None and _is_map(field) and isinstance(segment, Key | Name):
            out.append(Key(str(segment.value)))
            value = field.message_type.fields_by_name["value"]
            current = value.message_type
            field = None
            position += 1
            continue
        if current is None or not isinstance(segment, Name):
            break
        name = _RENAMES.get((current.full_name, segment.value), segment.value)
        if name in current.fields_by_name:
            field = current.fields_by_name[name]
            out.append(Name(name))
            if _is_repeated(field):
                current = None if _is_map(field) else field.message_type
            else:
                current = field.message_type
                field = None
            position += 1
            continue
        if name in current.oneofs_by_name:
            out.append(Name(name))
            position += 1
            current = None
            break
        break
    consumed = max(position - offset, 0)
    return _Walk(out if position > offset else [], consumed, position == len(segments))


def _is_index(segment: Segment) -> bool:
    return isinstance(segment, Index) or (
        isinstance(segment, Name) and segment.value.isdigit() and segment.value.isascii()
    )


def _json(segments: Sequence[Segment]) -> list[Segment]:
    return [s if isinstance(s, Index) else Name(str(s.value)) for s in segments]


def _is_repeated(field: descriptor.FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _is_map(field: descriptor.FieldDescriptor) -> bool:
    return bool(field.message_type is not None and field.message_type.GetOptions().map_entry)


def nul_paths(request: message.Message) -> list[str]:
    """The request paths of every string in `request` holding a NUL character
    (fields, map keys, Struct keys and values)."""
    found: list[list[Segment]] = []
    _nul_in_message(request, [], found)
    return [_join(segments) for segments in found]


def _nul_in_message(
    holder: message.Message, path: list[Segment], found: list[list[Segment]]
) -> None:
    if holder.DESCRIPTOR.full_name in _JSON_TYPES:
        _nul_in_json(holder, path, found)
        return
    for field, value in holder.ListFields():
        here = [*path, Name(field.name)]
        if _is_map(field):
            for key, item in value.items():
                at = [*here, Key(str(key))]
                if isinstance(key, str) and "\0" in key:
                    found.append(at)
                _nul_in_value(item, at, found)
        elif _is_repeated(field):
            for index, item in enumerate(value):
                _nul_in_value(item, [*here, Index(index)], found)
        else:
            _nul_in_value(value, here, found)


def _nul_in_value(value: object, path: list[Segment], found: list[list[Segment]]) -> None:
    if isinstance(value, message.Message):
        _nul_in_message(value, path, found)
    elif isinstance(value, str) and "\0" in value:
        found.append(path)


def _nul_in_json(value: message.Message, path: list[Segment], found: list[list[Segment]]) -> None:
    if isinstance(value, struct_pb2.Struct):
        for key, item in value.fields.items():
            at = [*path, Name(key)]
            if "\0" in key:
                found.append(at)
            _nul_in_json(item, at, found)
    elif isinstance(value, struct_pb2.ListValue):
        for index, item in enumerate(value.values):
            _nul_in_json(item, [*path, Index(index)], found)
    elif isinstance(value, struct_pb2.Value):
        kind = value.WhichOneof("kind")
        if kind == "string_value" and "\0" in value.string_value:
            found.append(path)
        elif kind in ("struct_value", "list_value"):
            _nul_in_json(getattr(value, kind), path, found)
