"""The stable request-key rule: how each elicitation request in a round is named.

A caller answers a round with one response per request key, so keys must be
stable (the same server and tool give the same key on every run) and readable.

Legacy elicitation (`elicitation/create`; the server holds the call open and
sends one request per round). The key is the first that applies of:

1. `_meta["m3/request_key"]`, when the server sent a non-empty string there;
2. URL mode: the request's `elicitationId`;
3. form mode: snake_case of the requested schema's `title` (the MCP Python SDK
   renders a pydantic model `ShippingAddress` with `title: "ShippingAddress"`,
   giving `shipping_address`);
4. otherwise `"input"`.

2026-07-28 multi round-trip (`InputRequiredResult.input_requests`, a map keyed
by the server). The key is the first that applies of:

1. `_meta["m3/request_key"]`, as above;
2. the server's key. A key of the MCP Python SDK's resolver shape
   `module:qualname[#n]` is shortened to the last component of the qualname
   (plus any `#n`): the SDK keys a `Resolve(shipping_address)` resolver as
   `__main__:shipping_address` or `pkg.mod:shipping_address` depending on how
   the server was started, and both give `shipping_address`. Other keys are
   used verbatim. (The SDK drops the schema `title` from MRTR requests, so
   titles cannot be used here.)

A URL-elicitation-required error (JSON-RPC -32042, 2025-11-25) lists URL
requests the user must complete before the call is retried; they form one
round, each keyed by the legacy rule (its `elicitationId`).

Keys are unique within a round: a key already taken falls back to the
server's verbatim key, then gets a `_2`, `_3`, ... suffix. The harness keeps
the mapping back to the server's keys for the retry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mcp_types import ElicitRequestFormParams, ElicitRequestParams, ElicitRequestURLParams

META_REQUEST_KEY = "m3/request_key"
DEFAULT_REQUEST_KEY = "input"

# `module:qualname` with an optional `#n` disambiguator, as built by
# mcp.server.mcpserver.resolve for `Resolve(...)` resolvers.
_SDK_RESOLVER_KEY = re.compile(
    r"^[A-Za-z_][\w.]*:(?:[\w<>]+\.)*(?P<name>[A-Za-z_]\w*)(?P<suffix>#\d+)?$"
)


def snake_case(text: str) -> str:
    """`ShippingAddress` -> `shipping_address`, `Shipping address` -> `shipping_address`."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", text)
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_").lower()


def _meta_key(params: ElicitRequestParams) -> str | None:
    value = (params.meta or {}).get(META_REQUEST_KEY)
    return value if isinstance(value, str) and value else None


def legacy_request_key(params: ElicitRequestParams) -> str:
    """The request key of a legacy `elicitation/create` request."""
    if (key := _meta_key(params)) is not None:
        return key
    if isinstance(params, ElicitRequestURLParams):
        if params.elicitation_id:
            return params.elicitation_id
    elif isinstance(params, ElicitRequestFormParams):
        title: Any = params.requested_schema.get("title")
        if isinstance(title, str) and (key := snake_case(title)):
            return key
    return DEFAULT_REQUEST_KEY


def url_required_request_keys(requests: Sequence[ElicitRequestParams]) -> dict[str, int]:
    """Request key -> position for the elicitations a URL-elicitation-required
    error (-32042) lists: each named by the legacy rule (its `elicitationId`),
    unique within the round."""
    keys: dict[str, int] = {}
    for index, params in enumerate(requests):
        candidate = legacy_request_key(params)
        keys[_unique(candidate, candidate, keys)] = index
    return keys


def _server_key(wire_key: str) -> str:
    match = _SDK_RESOLVER_KEY.match(wire_key)
    if match is None:
        return wire_key
    return match["name"] + (match["suffix"] or "")


def mrtr_request_keys(requests: Mapping[str, ElicitRequestParams]) -> dict[str, str]:
    """Request key -> server (wire) key for one `InputRequiredResult`, in server order."""
    keys: dict[str, str] = {}
    for wire_key, params in requests.items():
        candidate = _meta_key(params) or _server_key(wire_key)
        keys[_unique(candidate, wire_key, keys)] = wire_key
    return keys


def _unique(candidate: str, wire_key: str, taken: Iterable[str]) -> str:
    used = set(taken)
    if candidate not in used:
        return candidate
    if wire_key not in used:
        return wire_key
    n = 2
    while f"{wire_key}_{n}" in used:
        n += 1
    return f"{wire_key}_{n}"
