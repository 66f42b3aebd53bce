"""Recovery: every execution and round whose worker's lease expired.

A persisted round does not make a native harness action resumable (a legacy
`elicitation/create` held open, a native agent process), so such an orphaned
round is failed with `recovery_unavailable` (and its execution finishes
failed); it never becomes pending again. The one exception is a resumable
round (a 2026-07-28 round of a binding pinned to that protocol, still pending
or answered: see m3grpc.storage.handover): the server holds nothing open, so
its execution is released, and the next worker to claim it sends the retry.
"""

from __future__ import annotations

from collections.abc import Collection

from m3grpc.errors import ManagedInputRecoveryError, ManagedInputStateError
from m3grpc.runtime.lifecycle import Lifecycle
from m3grpc.storage import SqlExecutionStore
from m3grpc.types import ManagedInputStatus

# The statuses in which a resumable round is released rather than failed.
_RESUMABLE = (ManagedInputStatus.PENDING, ManagedInputStatus.RESPONSE_VALIDATED)


def recover_expired(
    store: SqlExecutionStore,
    live: Collection[str] = (),
    released: list[str] | None = None,
    lifecycle: Lifecycle | None = None,
) -> list[str]:
    """Fail the expired executions and rounds; returns the execution IDs finished.
    Those released for another worker instead are appended to `released`.

    `live` are the executions the calling process is running right now: their
    leases may have lapsed while its event loop stalled, but their owner is
    alive and renews them, so recovery must not fail them (a dead owner runs
    nothing, and another process's recovery still fails its work).
    """
    lifecycle = lifecycle or Lifecycle()
    finished: list[str] = []
    for execution_id in store.expired_execution_ids():
        if execution_id in live:
            continue
        try:
            if store.release_expired(execution_id):
                if released is not None:
                    released.append(execution_id)
                lifecycle.released(execution_id)
                continue
            if not store.recover_expired(execution_id):
                continue  # finished meanwhile (another replica's sweep came first)
        except ManagedInputRecoveryError:
            continue  # renewed meanwhile
        finished.append(execution_id)
        lifecycle.recovered("execution", execution_id)
    rounds = store.managed_input_store
    for round_id in rounds.expired_round_ids():
        try:
            record = rounds.get_round(round_id)
            if live and record.pending.execution_id in live:
                continue
            if record.harness_resume_token is not None and record.status in _RESUMABLE:
                # It passes on with its execution, once the execution's lease expired
                # (above); its own lease may lapse first (a kill between renewals).
                continue
            record = rounds.fail_recovery(round_id)
        except (ManagedInputRecoveryError, ManagedInputStateError):
            continue
        finished.append(record.pending.execution_id)
        lifecycle.recovered("round", record.pending.execution_id, round_id)
    return finished
