"""Opaque tokens: ListRounds page tokens (AIP-158) and WatchPending cursors.

Both are URL-safe base64 of a small JSON document with a version tag, so the
format can change without breaking tokens already handed out. They carry
positions only, never secrets; a token the server cannot read is a
MANAGED_INPUT_INVALID field violation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from m3grpc.errors import FieldViolation, ManagedInputValidationError

Keyset = tuple[datetime, str]  # (created_at, round_id): the order of list_rounds
# Longer than any token the service issues (a round ID is at most 128 characters).
MAX_TOKEN_CHARS = 2048
# Event sequence numbers are 64-bit signed integers in both stores.
_MAX_SEQ = 2**63 - 1


def _encode(document: dict[str, Any]) -> str:
    raw = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(token: str, field: str) -> dict[str, Any]:
    # Every token the service issues is a few hundred characters; a longer one is
    # not one of them, and is not decoded (nor its JSON's nesting walked).
    if len(token) > MAX_TOKEN_CHARS:
        raise _invalid(field, "unreadable")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError) as exc:
        raise _invalid(field, "unreadable") from exc
    if not isinstance(document, dict):
        raise _invalid(field, "unreadable")
    return document


def _invalid(field: str, why: str) -> ManagedInputValidationError:
    return ManagedInputValidationError(
        f"invalid {field}", field_violations=[FieldViolation(field, why)]
    )


def _keyset(document: dict[str, Any], field: str) -> Keyset:
    try:
        created_at = datetime.fromisoformat(document["t"])
        round_id = document["r"]
    except (KeyError, TypeError, ValueError) as exc:
        raise _invalid(field, "unreadable") from exc
    if created_at.tzinfo is None or not isinstance(round_id, str):
        raise _invalid(field, "unreadable")
    return created_at, round_id


# -- ListRounds -------------------------------------------------------------------


def filter_digest(execution_id: str, statuses: Collection[str]) -> str:
    """Binds a page token to the filters it was issued for."""
    text = json.dumps([execution_id, sorted(statuses)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def page_token(last: Keyset, filters: str) -> str:
    return _encode({"v": 1, "t": last[0].isoformat(), "r": last[1], "f": filters})


def read_page_token(token: str, filters: str) -> Keyset:
    document = _decode(token, "page_token")
    if document.get("v") != 1:
        raise _invalid("page_token", "unreadable")
    if document.get("f") != filters:
        raise _invalid("page_token", "was issued for other filters")
    return _keyset(document, "page_token")


# -- WatchPending -----------------------------------------------------------------


@dataclass(frozen=True)
class Cursor:
    """A stream position: after event `seq`; inside the snapshot taken at `seq`
    (after the round at `snapshot_after`) when that is set."""

    seq: int
    execution_id: str = ""
    snapshot_after: Keyset | None = None


def cursor_token(cursor: Cursor) -> str:
    document: dict[str, Any] = {"v": 1, "s": cursor.seq, "e": cursor.execution_id}
    if cursor.snapshot_after is not None:
        document["t"] = cursor.snapshot_after[0].isoformat()
        document["r"] = cursor.snapshot_after[1]
    return _encode(document)


def read_cursor(token: str, execution_id: str) -> Cursor:
    document = _decode(token, "cursor")
    seq = document.get("s")
    if (
        document.get("v") != 1
        or not isinstance(seq, int)
        or isinstance(seq, bool)
        or not 0 <= seq <= _MAX_SEQ
    ):
        raise _invalid("cursor", "unreadable")
    if document.get("e") != execution_id:
        raise _invalid("cursor", "was issued for another execution_id filter")
    snapshot_after = _keyset(document, "cursor") if "t" in document else None
    return Cursor(seq=seq, execution_id=execution_id, snapshot_after=snapshot_after)


def require_reached(cursor: Cursor, last_seq: int) -> None:
    """Refuse a cursor past the end of the event log (`last_seq`): issued by another
    database (a fresh one, or an older backup), it would skip every event until the
    log caught up with it, silently."""
    if cursor.seq > last_seq:
        raise _invalid(
            "cursor", "is past the end of the event log: it was issued by another database"
        )
