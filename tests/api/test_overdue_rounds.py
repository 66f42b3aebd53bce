"""A round's status is true at every read, black-box (docs/how-it-works/status-and-sweeping.md).

When a round's clock runs out with nobody holding it, Respond refuses it at once;
every read on every replica must say so at once too, and the execution must
finish without a worker picking it up:

- a 2026-07-28 round handed over at a SIGTERM, while only replicas without
  workers run: past its deadline it reads FAILED (`operation_timeout`) on both
  (GetRound, GetPending, ListRounds, the web inbox), its execution finishes
  failed, and each replica's WatchPending sends the change once;
- a legacy round whose worker was SIGKILLed: once the worker's lease has run
  out it reads FAILED (`recovery_unavailable`) on the replica in front, which
  finishes it, however long that replica's own lease is.

Each on SQLite (two processes on one file) and PostgreSQL (two replicas on one
database). Every wait is a bounded loop or a sleep until a known instant; no
assertion is on elapsed time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
)
from tests.storage.conftest import BACKENDS, backend_database

from .conftest import ServerProcess, Stubs, expect_failure, respond_request, write_config
from .inbox_support import InboxClient, InboxService
from .test_round_resume import get_round as read_round
from .test_round_resume import resume_config, submit_ledger
from .test_watch import Watcher

FAILED = elicitation_pb2.MANAGED_INPUT_STATUS_FAILED
PENDING = elicitation_pb2.MANAGED_INPUT_STATUS_PENDING
# Long enough for a SIGTERM to hand the round over before it runs out.
ROUND_TIMEOUT_SECONDS = 10
WORKER_LEASE = 2.0
# Without workers, and with a lease so long that a recovery pass on its own
# interval (the behaviour before the sweeper) would not come during a test.
IDLE: dict[str, Any] = {"pool_size": 0, "lease_seconds": 600.0}


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from backend_database(request, tmp_path / "m3.sqlite")


@pytest.fixture
def processes() -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    try:
        yield started
    finally:
        for process in started:
            if process.process is not None and process.process.poll() is None:
                process.kill()


def sleep_past(instant: datetime) -> None:
    """Until the wall clock (the services' clock too) is past `instant`."""
    time.sleep(max(0.0, (instant - datetime.now(UTC)).total_seconds()) + 0.05)


def listed(stubs: Stubs, execution_id: str, status: int) -> list[str]:
    request = elicitation_service_pb2.ListRoundsRequest(
        execution_id=execution_id, statuses=[status]
    )
    return [r.round_id for r in stubs.elicitation.ListRounds(request, timeout=30).rounds]


def assert_reads_failed(stubs: Stubs, execution_id: str, round_id: str, code: str) -> None:
    """Every gRPC read of the round says what Respond says: it is failed."""
    read = read_round(stubs, round_id)
    assert (read.status, read.failure_code) == (FAILED, code), read
    pending = stubs.elicitation.GetPending(
        elicitation_service_pb2.GetPendingRequest(execution_id=execution_id), timeout=30
    )
    assert not pending.HasField("round")
    assert listed(stubs, execution_id, PENDING) == []
    assert listed(stubs, execution_id, FAILED) == [round_id]


def logged(process: ServeProcess, *parts: str) -> int:
    """Lines of the process's log holding every one of `parts`."""
    assert process.log is not None
    return sum(all(p in line for p in parts) for line in process.log.read_text().splitlines())


def test_a_handed_over_round_past_its_deadline_reads_failed_on_every_replica(
    tmp_path: Path, database: str, processes: list[ServeProcess]
) -> None:
    ledger = tmp_path / "ledger.txt"
    first = ServerProcess(resume_config(tmp_path, database, name="first"), tmp_path / "first.log")
    processes.append(first.start())
    # Two replicas without workers (one serving the web inbox): nothing will claim
    # the round once the first service hands it over.
    front = InboxService(resume_config(tmp_path, database, name="a", **IDLE), tmp_path / "a.log")
    other = ServerProcess(resume_config(tmp_path, database, name="b", **IDLE), tmp_path / "b.log")
    processes += [front.start(), other.start()]
    a, b, stubs = front.stubs(), other.stubs(), first.stubs()
    try:
        execution_id = submit_ledger(stubs, ledger, round_timeout_seconds=ROUND_TIMEOUT_SECONDS)
        pending = stubs.wait_pending(execution_id)
        round_id = pending.round_id
        deadline = pending.deadline.ToDatetime(tzinfo=UTC)
        watchers = [Watcher(client, execution_id=execution_id) for client in (a, b)]
        for watcher in watchers:
            assert watcher.take(1) == [("pending", round_id)]
        assert first.terminate() == 0  # SIGTERM: the round is handed over, not failed
        assert datetime.now(UTC) < deadline, "the hand-over outlasted the round's timeout"
        assert read_round(a, round_id).status == PENDING

        sleep_past(deadline)
        # At once, whether or not a sweep has written it yet: Respond refuses it.
        for client in (a, b):
            assert_reads_failed(client, execution_id, round_id, "operation_timeout")
            refused = expect_failure(
                client.elicitation.Respond, respond_request(round_id, "late"), timeout=30
            )
            assert (refused.code, refused.info.reason) in {
                (grpc.StatusCode.DEADLINE_EXCEEDED, "OPERATION_TIMEOUT"),  # before the sweep
                (grpc.StatusCode.FAILED_PRECONDITION, "MANAGED_INPUT_STATE_INVALID"),  # after
            }, refused.status
        inbox = InboxClient(front.inbox_url)
        code, body = inbox.get(f"/api/rounds/{round_id}")
        assert code == 200 and body["round"]["status"] == "MANAGED_INPUT_STATUS_FAILED", body
        code, body = inbox.get("/api/rounds")
        assert code == 200 and round_id not in json.dumps(body)

        # No worker picks it up: a replica's sweep finishes the execution, as the
        # worker would have at the deadline.
        for client in (a, b):
            result = client.result(execution_id)
            assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED, result
            assert result.failure_code == "operation_timeout"
            assert [(op.operation_name, op.ok) for op in result.operations] == [
                ("reserve", True),
                ("book", False),
            ]
            assert result.operations[1].failure_code == "operation_timeout"
        assert [line.split(" pid=")[0] for line in ledger.read_text().splitlines()] == [
            "reserved crate",
            "asked",
        ]
        for watcher in watchers:  # each replica's stream sends the change once
            assert watcher.end() == [
                ("left", round_id, "MANAGED_INPUT_STATUS_FAILED"),
                ("finished", execution_id, "EXECUTION_OUTCOME_FAILED"),
            ]
            assert watcher.error is None
        # One replica's sweep did it; the other's found nothing left to do.
        failed = ("event=round.failed", f"round_id={round_id}")
        assert logged(front, *failed) + logged(other, *failed) == 1
    finally:
        for client in (a, b, stubs):
            client.close()


def test_a_killed_workers_round_reads_failed_once_its_lease_ran_out(
    tmp_path: Path, database: str, processes: list[ServeProcess]
) -> None:
    front_config = write_config(tmp_path / "front.toml", database, **IDLE)
    worker_config = write_config(
        tmp_path / "worker.toml", database, pool_size=1, lease_seconds=WORKER_LEASE
    )
    front = ServerProcess(front_config, tmp_path / "front.log")
    worker = ServerProcess(worker_config, tmp_path / "worker.log")
    processes += [front.start(), worker.start()]
    client = front.stubs()
    try:
        execution_id = client.submit_managed()  # legacy: elicitation/create held open
        round_id = client.wait_pending(execution_id).round_id
        watcher = Watcher(client, execution_id=execution_id)
        assert watcher.take(1) == [("pending", round_id)]
        worker.kill()  # SIGKILL: its lease is never released, and never renewed again
        killed = datetime.now(UTC)
        # Its last renewal came before the kill: the lease has run out by then.
        sleep_past(killed + timedelta(seconds=WORKER_LEASE))

        assert_reads_failed(client, execution_id, round_id, "recovery_unavailable")
        late = expect_failure(client.elicitation.Respond, respond_request(round_id, "late"))
        assert late.code == grpc.StatusCode.FAILED_PRECONDITION
        assert late.info.reason == "MANAGED_INPUT_RECOVERY_UNAVAILABLE"
        result = client.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED, result
        assert result.failure_code == "recovery_unavailable"
        assert watcher.end() == [
            ("left", round_id, "MANAGED_INPUT_STATUS_FAILED"),
            ("finished", execution_id, "EXECUTION_OUTCOME_FAILED"),
        ]
        # The front's sweep recovered it (the execution, or its round), once.
        assert logged(front, ".recovered", f"execution_id={execution_id}") == 1
    finally:
        client.close()
