"""Recovery: fail closed every execution and round whose worker's lease expired.

A persisted round does not make a native harness action resumable, so an
orphaned round is failed with `recovery_unavailable` (and its execution
finishes failed); it never becomes pending again.
"""

from __future__ import annotations

import logging

from m3grpc.errors import ManagedInputRecoveryError, ManagedInputStateError
from m3grpc.storage import SqlExecutionStore

log = logging.getLogger(__name__)


def recover_expired(store: SqlExecutionStore) -> list[str]:
    """Fail the expired executions and rounds; returns the execution IDs finished."""
    finished: list[str] = []
    for execution_id in store.expired_execution_ids():
        try:
            store.fail_recovery(execution_id)
        except ManagedInputRecoveryError:
            continue  # renewed meanwhile
        finished.append(execution_id)
        log.warning("recovered execution %s: its worker disappeared", execution_id)
    rounds = store.managed_input_store
    for round_id in rounds.expired_round_ids():
        try:
            record = rounds.fail_recovery(round_id)
        except (ManagedInputRecoveryError, ManagedInputStateError):
            continue
        finished.append(record.pending.execution_id)
        log.warning("recovered round %s: its worker disappeared", round_id)
    return finished
