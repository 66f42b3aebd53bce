"""The worker lease (ManagedInputLease) of a running execution, shared by heartbeat and rounds."""

from __future__ import annotations

from dataclasses import dataclass

from m3grpc.types import ManagedInputLease


@dataclass
class LeaseHolder:
    """The current lease; the heartbeat replaces it on renewal (same token, later expiry)."""

    lease: ManagedInputLease
    # The write that ends the lease (the execution's finish) is under way: once it
    # commits the lease is gone, and a renewal that finds it gone before the worker
    # hears back is no loss (a lease lost for real refuses the finish itself).
    ending: bool = False
