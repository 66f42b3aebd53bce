"""Lease tokens: the compare-and-set half of a worker's lease on an execution or round."""

from __future__ import annotations

import secrets


def new_lease_token() -> str:
    """An unguessable token: a stale or forged lease can never match a live one."""
    return secrets.token_urlsafe(18)
