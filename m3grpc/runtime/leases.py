"""The worker lease (ManagedInputLease) of a running execution, shared by heartbeat and rounds."""

from __future__ import annotations

from dataclasses import dataclass

from m3grpc.types import ManagedInputLease


@dataclass
class LeaseHolder:
    """The current lease; the heartbeat replaces it on renewal (same token, later expiry)."""

    lease: ManagedInputLease
