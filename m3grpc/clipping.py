"""The one helper that cuts a caller's or a server's text to a size before it is echoed or stored.

Errors never echo unbounded input and stored failure messages stay bounded:
gRPC sends a status in trailers (counted in UTF-8 bytes, which clients cap),
while database columns and messages are counted in characters. Both cuts end
with the same mark, the whole text's length: `...(N chars)`.
"""

from __future__ import annotations

from typing import Literal

# How much of a caller's value an error message or ErrorInfo metadata may echo.
ECHO_CHARS = 80


def clip(
    value: object, limit: int = ECHO_CHARS, *, unit: Literal["chars", "bytes"] = "chars"
) -> str:
    """`value` (its repr unless a str) in at most `limit` characters or UTF-8 bytes.

    A cut keeps the start and marks it with the whole text's length in
    characters; the mark is ASCII, so it costs as many bytes as characters.
    """
    text = value if isinstance(value, str) else repr(value)
    encoded = text.encode() if unit == "bytes" else None
    if len(text if encoded is None else encoded) <= limit:
        return text
    suffix = f"...({len(text)} chars)"
    room = max(limit - len(suffix), 0)
    head = text[:room] if encoded is None else encoded[:room].decode(errors="ignore")
    return head + suffix
