"""A 2026-07-28 round outlives the worker that opened it, black-box.

A binding pinned to protocol 2026-07-28 pauses an operation without holding
anything open on the MCP server: the server hands back a sealed `requestState`,
M3 stores it with the round, and whichever worker claims the execution next
sends the retry. The test server (tests/mcp_servers/ledger.py) seals its state
with a fixed key, so a fresh server process verifies the retry, and it records
every side effect with the process it ran in: the tests check that the retry
reached a process other than the one that asked, and that the operation that
completed before the round ran exactly once.

- SIGTERM between the round and the answer: the round stays pending, the
  execution waits; after a restart the answer completes it.
- SIGKILL likewise (the lease expires; recovery releases rather than fails).
- An ephemeral-key server refuses the resumed retry (`request_state_rejected`),
  which shows the retry really carried the stored state to a new process.
- A binding that is not pinned to 2026-07-28 (legacy, or "auto") still fails
  closed at a graceful shutdown (`worker_shutdown`).

The two-PostgreSQL-replica case is in test_postgres_replicas.py. Every wait is a
bounded loop; nothing asserts on elapsed time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import ADDRESS, BOOKED, SERVERS, ServerProcess, Stubs, write_config

LEASE = 2.0


def resume_config(tmp: Path, database: Path | str, name: str = "server", **options: Any) -> Path:
    """The black-box config plus `ledger` (pinned to 2026-07-28, fixed key) and
    `ledger_ephemeral` (the same server sealing with a per-process key)."""
    path = write_config(tmp / f"{name}.toml", database, **{"lease_seconds": LEASE, **options})
    lines = []
    for binding, extra in (("ledger", []), ("ledger_ephemeral", ["--ephemeral-key"])):
        lines += [
            f"[servers.{binding}]",
            f"command = {json.dumps(sys.executable)}",
            f"args = {json.dumps([str(SERVERS / 'ledger.py'), *extra])}",
            'protocol = "2026-07-28"',
        ]
    path.write_text(path.read_text() + "\n".join(lines) + "\n")
    return path


def submit_ledger(
    stubs: Stubs, ledger: Path, server: str = "ledger", round_timeout_seconds: int = 0
) -> str:
    """reserve (no input, a side effect) then book (a round), managed; the round
    with its own deadline if `round_timeout_seconds` is given."""
    reserve = execution_pb2.OperationStep(kind=execution_pb2.OPERATION_KIND_TOOL, name="reserve")
    reserve.arguments.update({"ledger": str(ledger), "item": "crate"})
    book = execution_pb2.OperationStep(kind=execution_pb2.OPERATION_KIND_TOOL, name="book")
    book.arguments.update({"ledger": str(ledger)})
    spec = execution_pb2.AgentSpec(
        harness="scripted",
        server=server,
        tools=[f"{server}:reserve", f"{server}:book"],
        prompt="Reserve a crate, then book its shipment.",
        script=[reserve, book],
    )
    if round_timeout_seconds:
        spec.round_timeout.FromSeconds(round_timeout_seconds)
    request = execution_service_pb2.SubmitRequest(
        agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
    )
    return str(stubs.executions.Submit(request, timeout=30).execution_id)


def get_round(stubs: Stubs, round_id: str) -> elicitation_pb2.ElicitationRound:
    request = elicitation_service_pb2.GetRoundRequest(round_id=round_id)
    return stubs.elicitation.GetRound(request, timeout=30).round


def lifecycle(stubs: Stubs, execution_id: str) -> int:
    request = execution_service_pb2.SnapshotRequest(execution_id=execution_id)
    return int(stubs.executions.Snapshot(request, timeout=30).state.lifecycle)


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def assert_resumed_once(result: execution_pb2.ExecutionResult, ledger: Path) -> None:
    """Succeeded; reserve ran once, book asked once and was answered in another
    server process, with the state the first one sealed."""
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
    reserved, booked = result.operations
    assert reserved.ok and reserved.result["structuredContent"]["result"] == "reserved crate"
    assert booked.ok and booked.result["structuredContent"]["result"] == BOOKED
    lines = ledger_lines(ledger)
    assert [line.split(" pid=")[0] for line in lines[:2]] == ["reserved crate", "asked"], lines
    assert len(lines) == 3, lines
    asked_in = lines[1].removeprefix("asked pid=")
    street_city = f"{ADDRESS['street']}, {ADDRESS['city']}"
    prefix = f"booked {street_city} asked_by={asked_in} answered_in="
    assert lines[2].startswith(prefix), lines
    assert lines[2].removeprefix(prefix) != asked_in, "the retry reached the asking process"


def wait_until_paused(stubs: Stubs, execution_id: str) -> str:
    """The round's ID once it is pending (book asked; reserve is stored)."""
    return str(stubs.wait_pending(execution_id).round_id)


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_pending_round_survives_a_restart(tmp_path: Path, signal_name: str) -> None:
    ledger = tmp_path / "ledger.txt"
    config = resume_config(tmp_path, tmp_path / "m3.sqlite")
    first = ServerProcess(config, tmp_path / "first.log").start()
    stubs = first.stubs()
    try:
        execution_id = submit_ledger(stubs, ledger)
        round_id = wait_until_paused(stubs, execution_id)
    finally:
        stubs.close()
    if signal_name == "SIGTERM":
        assert first.terminate() == 0
    else:
        first.kill()

    second = ServerProcess(config, tmp_path / "second.log").start()
    stubs = second.stubs()
    try:
        # Nothing failed it: the round waits for its answer, whoever runs it next.
        pending = get_round(stubs, round_id)
        assert pending.status == elicitation_pb2.MANAGED_INPUT_STATUS_PENDING, pending
        assert lifecycle(stubs, execution_id) == execution_pb2.EXECUTION_STATUS_WAITING_FOR_INPUT
        again = stubs.wait_pending(execution_id)
        assert again.round_id == round_id
        stubs.respond(round_id, "address-1")
        assert_resumed_once(stubs.result(execution_id), ledger)
        done = get_round(stubs, round_id)
        assert done.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED, done
    finally:
        stubs.close()
        second.stop()


def test_an_answered_round_survives_a_graceful_shutdown_too(tmp_path: Path) -> None:
    """The answer arrives while no worker holds the round (after SIGTERM, before
    the restart): it is kept, and the next worker delivers it."""
    ledger = tmp_path / "ledger.txt"
    config = resume_config(tmp_path, tmp_path / "m3.sqlite", pool_size=1)
    first = ServerProcess(config, tmp_path / "first.log").start()
    stubs = first.stubs()
    try:
        execution_id = submit_ledger(stubs, ledger)
        round_id = wait_until_paused(stubs, execution_id)
    finally:
        stubs.close()
    assert first.terminate() == 0
    # An idle service (no workers) takes the answer meanwhile.
    idle = ServerProcess(
        resume_config(tmp_path, tmp_path / "m3.sqlite", name="idle", pool_size=0),
        tmp_path / "idle.log",
    ).start()
    stubs = idle.stubs()
    try:
        answered = stubs.respond(round_id, "address-1")
        assert answered.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESPONSE_VALIDATED
    finally:
        stubs.close()
        idle.stop()
    second = ServerProcess(config, tmp_path / "second.log").start()
    stubs = second.stubs()
    try:
        assert_resumed_once(stubs.result(execution_id), ledger)
    finally:
        stubs.close()
        second.stop()


def test_a_server_without_a_shared_key_refuses_the_resumed_retry(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    config = resume_config(tmp_path, tmp_path / "m3.sqlite")
    first = ServerProcess(config, tmp_path / "first.log").start()
    stubs = first.stubs()
    try:
        execution_id = submit_ledger(stubs, ledger, server="ledger_ephemeral")
        round_id = wait_until_paused(stubs, execution_id)
    finally:
        stubs.close()
    assert first.terminate() == 0
    second = ServerProcess(config, tmp_path / "second.log").start()
    stubs = second.stubs()
    try:
        stubs.respond(round_id, "address-1")
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED, result
        assert result.failure_code == "request_state_rejected"
        assert [op.ok for op in result.operations] == [True, False]
        # The state was presented to a new process, which could not verify it.
        assert [line.split(" pid=")[0] for line in ledger_lines(ledger)] == [
            "reserved crate",
            "asked",
        ]
    finally:
        stubs.close()
        second.stop()


@pytest.mark.parametrize("server", ["shipping", "shipping_mrtr"])
def test_a_round_not_pinned_to_2026_07_28_still_fails_closed(tmp_path: Path, server: str) -> None:
    """Legacy (`elicitation/create` held open) and an "auto" binding (it may
    negotiate another generation on reconnect) are not resumable."""
    config = resume_config(tmp_path, tmp_path / "m3.sqlite")
    first = ServerProcess(config, tmp_path / "first.log").start()
    stubs = first.stubs()
    try:
        execution_id = stubs.submit_managed(server=server)
        round_id = wait_until_paused(stubs, execution_id)
    finally:
        stubs.close()
    assert first.terminate() == 0
    second = ServerProcess(config, tmp_path / "second.log").start()
    stubs = second.stubs()
    try:
        failed = get_round(stubs, round_id)
        assert failed.status == elicitation_pb2.MANAGED_INPUT_STATUS_FAILED, failed
        assert failed.failure_code == "worker_shutdown"
        result = stubs.result(execution_id)
        assert result.failure_code == "worker_shutdown"
        pending = stubs.elicitation.GetPending(
            elicitation_service_pb2.GetPendingRequest(execution_id=execution_id), timeout=30
        )
        assert not pending.HasField("round")
    finally:
        stubs.close()
        second.stop()
