"""The strings M3 can keep and send, wherever they come from.

A Python string may hold two things no M3 string may:
- a NUL (U+0000): PostgreSQL text and JSONB columns refuse it;
- a lone surrogate (U+D800-U+DFFF, half of a UTF-16 pair): no UTF-8 encoding has
  one, so neither JSON on the wire nor a protobuf string can carry it.

gRPC requests cannot carry lone surrogates (protobuf refuses invalid UTF-8), and
their NULs are refused as they are decoded (`m3grpc.api.registration`). The
embedded API and the web inbox's JSON (`"\\ud800"`, `"\\u0000"`) reach the
runtime and the store with either, so both check here too.
"""

from __future__ import annotations

import re

# One pass over a string for either kind: the check runs on every answer's content.
UNSENDABLE = re.compile("[\x00\ud800-\udfff]")

NUL_PROBLEM = "must not contain NUL (U+0000) characters"
SURROGATE_PROBLEM = "must not contain lone surrogates (U+D800-U+DFFF): it is not valid Unicode"


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored or sent, or None if it can."""
    found = UNSENDABLE.search(value)
    if found is None:
        return None
    return NUL_PROBLEM if found.group() == "\x00" else SURROGATE_PROBLEM
