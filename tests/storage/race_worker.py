"""A process that races other processes on one SQLite store (see test_multiprocess_race).

`run` is the target of a multiprocessing "spawn" process: it opens its own
store on the shared file, waits on a barrier so that every process starts at
once, performs a bounded list of store calls, and writes what happened to a
JSON file. A typed M3 error is an outcome; any other exception is recorded as
"unexpected" (the test fails on it) and ends the process with exit code 1.
"""

from __future__ import annotations

import functools
import json
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from m3grpc.errors import M3Error, ManagedInputConflict
from m3grpc.storage import ManagedInputLease, ManagedInputRecord, SqlExecutionStore
from m3grpc.types import ElicitationResponse


def outcome_of(error: M3Error) -> str:
    """A short, comparable name for a typed error."""
    if isinstance(error, ManagedInputConflict):
        return f"conflict:{error.conflict_kind.value}"
    return type(error).__name__


class Recorder:
    """Runs store calls once each (no retries: a busy database must not show) and
    records their outcomes."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.unexpected: list[str] = []

    def call(self, operation: str, round_id: str, action: Callable[[], Any]) -> Any:
        """Run one store call; record its outcome; return its result (None on a typed error).

        Any exception that is not an M3Error propagates and fails the process."""
        entry: dict[str, Any] = {"op": operation, "round_id": round_id}
        try:
            result = action()
        except M3Error as error:
            entry["outcome"] = outcome_of(error)
            self.calls.append(entry)
            return None
        if isinstance(result, ManagedInputRecord):
            entry["outcome"] = "ok"
            entry["status"] = result.status.value
            assert result.lease is not None
            entry["expires_at"] = result.lease.expires_at.isoformat()
        else:  # a ResponseSubmission
            entry["outcome"] = "replayed" if result.replayed else "won"
            entry["status"] = result.record.status.value
        self.calls.append(entry)
        return result


def _submit(store: Any, recorder: Recorder, plan: dict[str, Any]) -> None:
    responses = {
        key: ElicitationResponse.model_validate(value) for key, value in plan["responses"].items()
    }
    for round_id in plan["round_ids"]:
        recorder.call(
            "submit_responses",
            round_id,
            lambda round_id=round_id: store.submit_responses_detailed(
                round_id, responses, idempotency_key=plan["idempotency_key"]
            ),
        )


def _deliver(store: Any, recorder: Recorder, plan: dict[str, Any]) -> None:
    for round_id in plan["round_ids"]:
        lease = ManagedInputLease.model_validate(plan["leases"][round_id])
        for operation in ("start_delivery", "mark_delivered", "resolve"):
            step = functools.partial(getattr(store, operation), round_id, lease)
            if recorder.call(operation, round_id, step) is None:
                break


def _renew(store: Any, recorder: Recorder, plan: dict[str, Any]) -> None:
    # Every renewal asks for a longer lease than the one before, so the lease the
    # store ends with tells which renewal committed last.
    seconds = plan["base_seconds"]
    for _pass in range(plan["passes"]):
        for round_id in plan["round_ids"]:
            seconds += 1
            lease = ManagedInputLease.model_validate(plan["leases"][round_id])
            duration = timedelta(seconds=seconds)
            recorder.call(
                "renew",
                round_id,
                lambda r=round_id, lease=lease, d=duration: store.renew(r, lease, lease_duration=d),
            )


ROLES = {"submit": _submit, "deliver": _deliver, "renew": _renew}


def run(role: str, database: str, plan: dict[str, Any], result_path: str, barrier: Any) -> None:
    recorder = Recorder()
    exit_code = 0
    span: tuple[float, float] | None = None
    execution_store = SqlExecutionStore(database)
    try:
        store = execution_store.managed_input_store
        barrier.wait(timeout=60)
        started_at = time.time()
        ROLES[role](store, recorder, plan)
        span = (started_at, time.time())
    except Exception:
        recorder.unexpected.append(traceback.format_exc())
        exit_code = 1
    finally:
        execution_store.close()
        Path(result_path).write_text(
            json.dumps(
                {
                    "role": role,
                    "calls": recorder.calls,
                    "unexpected": recorder.unexpected,
                    # Wall-clock start and end of the calls, for diagnostics only.
                    "span": span,
                }
            )
        )
    if exit_code:
        raise SystemExit(exit_code)
