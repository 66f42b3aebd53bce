"""A paused 2026-07-28 execution is parked while it waits, black-box: after
`park_after_seconds` its worker lets go of it (the store holds it with no owner and no
lease; the process no task), and the answer, its deadline or a cancel brings it back.

- Answered: a worker claims it again, adopts the round and sends the retry; the
  operation before the round ran once, and the retry reached the server with the state
  the first call sealed (tests/mcp_servers/ledger.py records both).
- Its deadline passes: a worker claims it and fails the round (`operation_timeout`).
- Cancelled: it finishes CANCELLED at once (no worker needed).

On a real SQLite file, read directly to see what holds the execution. Every wait is a
bounded loop; nothing asserts on elapsed time.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from m3grpc.wire.gen.m3.v1 import elicitation_pb2, execution_pb2, execution_service_pb2

from .conftest import ServerProcess, Stubs
from .test_round_resume import assert_resumed_once, get_round, resume_config, submit_ledger


def parking_config(tmp_path: Path) -> tuple[Path, Path]:
    database = tmp_path / "m3.sqlite"
    return resume_config(tmp_path, database, park_after=0.0), database


def holders(database: Path, execution_id: str) -> tuple[object, ...]:
    """(execution's owner, its lease expiry, its round's owner, its round's status)."""
    with sqlite3.connect(database) as conn:
        owner, expires = conn.execute(
            "SELECT worker_owner_id, worker_lease_expires_at FROM m3_executions"
            " WHERE execution_id = ?",
            (execution_id,),
        ).fetchone()
        round_owner, status = conn.execute(
            "SELECT owner_id, status FROM m3_managed_input_rounds WHERE execution_id = ?"
            " ORDER BY created_at DESC LIMIT 1",
            (execution_id,),
        ).fetchone()
    return owner, expires, round_owner, status


def until_parked(database: Path, execution_id: str) -> None:
    for _ in range(600):  # bounded: at most 60 s
        if holders(database, execution_id) == (None, None, None, "pending"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{execution_id} was not parked: {holders(database, execution_id)}")


def test_a_parked_execution_holds_nothing_and_resumes_when_answered(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    config, database = parking_config(tmp_path)
    server = ServerProcess(config, tmp_path / "server.log").start()
    stubs = server.stubs()
    try:
        execution_id = submit_ledger(stubs, ledger)
        round_id = str(stubs.wait_pending(execution_id).round_id)
        until_parked(database, execution_id)
        # Parked, it still reads as waiting for input, with its round pending.
        assert get_round(stubs, round_id).status == elicitation_pb2.MANAGED_INPUT_STATUS_PENDING
        assert stubs.wait_pending(execution_id).round_id == round_id
        stubs.respond(round_id, "address-1")
        assert_resumed_once(stubs.result(execution_id), ledger)
        assert get_round(stubs, round_id).status == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED
    finally:
        stubs.close()
        server.stop()
    assert "execution.parked" in (tmp_path / "server.log").read_text()


def test_a_parked_round_fails_at_its_deadline(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    config, database = parking_config(tmp_path)
    server = ServerProcess(config, tmp_path / "server.log").start()
    stubs = server.stubs()
    try:
        execution_id = submit_ledger_with_deadline(stubs, ledger, seconds=3)
        round_id = str(stubs.wait_pending(execution_id).round_id)
        until_parked(database, execution_id)
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED, result
        assert result.failure_code == "operation_timeout", result
        failed = get_round(stubs, round_id)
        assert failed.status == elicitation_pb2.MANAGED_INPUT_STATUS_FAILED, failed
    finally:
        stubs.close()
        server.stop()


def test_a_parked_execution_is_cancelled_at_once(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    config, database = parking_config(tmp_path)
    server = ServerProcess(config, tmp_path / "server.log").start()
    stubs = server.stubs()
    try:
        execution_id = submit_ledger(stubs, ledger)
        stubs.wait_pending(execution_id)
        until_parked(database, execution_id)
        stubs.executions.Cancel(
            execution_service_pb2.CancelRequest(execution_id=execution_id), timeout=30
        )
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_CANCELLED, result
    finally:
        stubs.close()
        server.stop()


def submit_ledger_with_deadline(stubs: Stubs, ledger: Path, *, seconds: int) -> str:
    """As submit_ledger, with a round timeout."""
    reserve = execution_pb2.OperationStep(kind=execution_pb2.OPERATION_KIND_TOOL, name="reserve")
    reserve.arguments.update({"ledger": str(ledger), "item": "crate"})
    book = execution_pb2.OperationStep(kind=execution_pb2.OPERATION_KIND_TOOL, name="book")
    book.arguments.update({"ledger": str(ledger)})
    spec = execution_pb2.AgentSpec(
        harness="scripted",
        server="ledger",
        tools=["ledger:reserve", "ledger:book"],
        prompt="Reserve a crate, then book its shipment.",
        script=[reserve, book],
    )
    spec.round_timeout.FromSeconds(seconds)
    request = execution_service_pb2.SubmitRequest(
        agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
    )
    return str(stubs.executions.Submit(request, timeout=30).execution_id)
