"""Several `m3grpc serve` replicas on ONE PostgreSQL database, black-box through
the generated stubs: what users of a multi-replica deployment rely on.

- a replica without workers takes calls while another replica runs the work,
  and its WatchPending stream sees the other replica's writes;
- worker replicas share one queue and run every execution exactly once;
- a replica that dies with a pending round is recovered closed by another one,
  unless the round is resumable (2026-07-28, pinned): then the other one takes
  the execution over and delivers the answer.

Each test gets a fresh database on the server named by M3_TEST_POSTGRES_URL
(skipped when it is unset). Every wait is bounded; nothing asserts on time.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from google.rpc import error_details_pb2

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.storage.conftest import POSTGRES_URL, postgres_database

from .conftest import (
    ADDRESS,
    BOOKED,
    ServerProcess,
    Stubs,
    expect_failure,
    respond_request,
    write_config,
)
from .test_round_resume import assert_resumed_once, resume_config, submit_ledger
from .test_watch import Key, Watcher

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(POSTGRES_URL is None, reason="M3_TEST_POSTGRES_URL not set"),
]

SUCCEEDED = "EXECUTION_OUTCOME_SUCCEEDED"
FAILED = "EXECUTION_OUTCOME_FAILED"
SHORT_LEASE = 1.5
# An idle replica: no workers, and a lease of its own so long that only other
# replicas' leases and rounds' deadlines are due during a test (its sweeper
# still carries those out).
IDLE = {"pool_size": 0, "lease_seconds": 600.0}
# A log record of the service above INFO (the log format is "date time LEVEL logger: ..."),
# or a traceback.
COMPLAINT = re.compile(r"\S+ \S+ (WARNING|ERROR|CRITICAL) m3grpc\.|Traceback")


@pytest.fixture
def database() -> Iterator[str]:
    """The URL of a fresh, empty PostgreSQL database, dropped afterwards."""
    yield from postgres_database()


class Replicas:
    """`m3grpc serve` subprocesses on one database; all stopped at teardown."""

    def __init__(self, tmp: Path, database: str) -> None:
        self.tmp = tmp
        self.database = database
        self.processes: dict[str, ServerProcess] = {}
        self._stubs: list[Stubs] = []

    def start(self, **replicas: dict[str, Any]) -> list[Stubs]:
        """Start the named replicas (name -> write_config options) concurrently and
        return a client for each, in order."""
        for name, options in replicas.items():
            config = write_config(self.tmp / f"{name}.toml", self.database, **options)
            self.processes[name] = ServerProcess(config, self.tmp / f"{name}.log")
        with ThreadPoolExecutor(max_workers=len(replicas)) as pool:
            list(pool.map(lambda name: self.processes[name].start(), replicas))
        clients = [self.processes[name].stubs() for name in replicas]
        self._stubs += clients
        return clients

    def complaints(self, name: str) -> list[str]:
        """The service's warnings and errors, and any traceback, in a replica's log so far."""
        text = (self.tmp / f"{name}.log").read_text()
        return [line for line in text.splitlines() if COMPLAINT.match(line)]

    def stop(self) -> None:
        for client in self._stubs:
            client.close()
        for process in self.processes.values():
            if process.process is not None and process.process.poll() is None:
                try:
                    process.terminate(timeout=30)
                except Exception:
                    process.kill()


@pytest.fixture
def replicas(tmp_path: Path, database: str) -> Iterator[Replicas]:
    group = Replicas(tmp_path, database)
    try:
        yield group
    finally:
        group.stop()


def book_operation() -> execution_pb2.OperationSpec:
    """A fail-mode book_shipment whose elicitation the plan answers (no human)."""
    rule = execution_pb2.ElicitationRule(request_key="shipping_address")
    rule.accept_content.update(ADDRESS)
    return execution_pb2.OperationSpec(
        server="shipping",
        operation=execution_pb2.OperationStep(
            kind=execution_pb2.OPERATION_KIND_TOOL, name="book_shipment"
        ),
        elicitation_plan=execution_pb2.ElicitationPlan(rules=[rule]),
    )


def submit_operation(stubs: Stubs, operation: execution_pb2.OperationSpec) -> str:
    request = execution_service_pb2.SubmitRequest(
        operation=operation, human_input=execution_pb2.HUMAN_INPUT_FAIL
    )
    return str(stubs.executions.Submit(request, timeout=30).execution_id)


def get_round(stubs: Stubs, round_id: str) -> elicitation_pb2.ElicitationRound:
    request = elicitation_service_pb2.GetRoundRequest(round_id=round_id)
    return stubs.elicitation.GetRound(request, timeout=30).round


def booked_text(result: execution_pb2.ExecutionResult) -> str:
    (operation,) = result.operations
    assert operation.ok, operation
    return str(operation.result["structuredContent"]["result"])


def finished(execution_id: str, outcome: str) -> Key:
    return ("finished", execution_id, outcome)


# -- 1. an idle replica in front, a worker replica behind ---------------------------------


def test_idle_replica_serves_a_managed_execution_run_by_another(replicas: Replicas) -> None:
    a, _b = replicas.start(a=IDLE, b={"pool_size": 2})

    # Opened before the submission: every event below reaches it live (the round
    # could only come from its snapshot if the stream started very late).
    everything = Watcher(a)
    execution_id = a.submit_managed()
    only_this = Watcher(a, execution_id=execution_id)

    pending = a.wait_pending(execution_id)  # A has no workers: B ran it to this round
    assert pending.execution_id == execution_id
    assert set(pending.requests) == {"shipping_address"}
    state = a.executions.Snapshot(
        execution_service_pb2.SnapshotRequest(execution_id=execution_id), timeout=30
    ).state
    assert state.lifecycle == execution_pb2.EXECUTION_STATUS_WAITING_FOR_INPUT

    # B wrote the round, and A has committed nothing since that could wake its
    # streams: A's polling of the shared event log brings it (the finish below too).
    assert everything.take(1) == [("pending", pending.round_id)]
    assert only_this.take(1) == [("pending", pending.round_id)]

    answered = a.respond(pending.round_id, f"address-{pending.round_id}")
    assert answered.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESPONSE_VALIDATED
    assert not answered.replayed

    # B's worker picks the answer up from the database and finishes the execution.
    result = a.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
    assert booked_text(result) == BOOKED
    assert get_round(a, pending.round_id).status == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED

    rest = [
        ("left", pending.round_id, "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"),
        finished(execution_id, SUCCEEDED),
    ]
    assert only_this.end() == rest  # a filtered stream ends after the finish
    assert only_this.error is None
    assert everything.take(2) == rest
    everything.close()
    assert replicas.complaints("a") == replicas.complaints("b") == []


# -- 2. worker replicas share one queue -----------------------------------------------------


def test_worker_replicas_share_the_queue_exactly_once(replicas: Replicas) -> None:
    a, b = replicas.start(a={"pool_size": 2}, b={"pool_size": 2})
    # The stream is surely live once it shows a round: live, or from its snapshot
    # if it started late. Every event committed after that reaches it.
    watch = Watcher(a)
    opener = a.submit_managed()
    opening = a.wait_pending(opener)
    assert watch.take(1) == [("pending", opening.round_id)]
    b.respond(opening.round_id, "opener")

    execution_ids = [submit_operation((a, b)[i % 2], book_operation()) for i in range(8)]
    for index, execution_id in enumerate(execution_ids):
        result = (b, a)[index % 2].result(execution_id)  # ask the other replica
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
        assert result.execution_id == execution_id
        assert booked_text(result) == BOOKED

    # A barrier: event order is commit order, so once the stream shows the
    # sentinel's finish it has shown every event committed before it.
    quote = execution_pb2.OperationSpec(
        server="shipping",
        operation=execution_pb2.OperationStep(kind=execution_pb2.OPERATION_KIND_TOOL, name="quote"),
    )
    sentinel = submit_operation(b, quote)
    events = watch.take_until(finished(sentinel, SUCCEEDED))
    watch.close()
    assert Counter(events) == Counter(
        [
            ("left", opening.round_id, "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"),
            *[finished(e, SUCCEEDED) for e in [opener, *execution_ids, sentinel]],
        ]
    )
    for client in (a, b):
        for execution_id in execution_ids:
            state = client.executions.Snapshot(
                execution_service_pb2.SnapshotRequest(execution_id=execution_id), timeout=30
            ).state
            assert state.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    # A second run of an execution would only show here: its loser cannot finish it
    # (its lease is gone) and logs "lost its lease before its finish" as an error.
    assert replicas.complaints("a") == replicas.complaints("b") == []


# -- 3. a dead replica's round is recovered by another ---------------------------------


def test_round_of_a_killed_replica_is_recovered_by_another(replicas: Replicas) -> None:
    a, b = replicas.start(a=IDLE, b={"pool_size": 1, "lease_seconds": SHORT_LEASE})
    execution_id = a.submit_managed()
    pending = a.wait_pending(execution_id)
    round_id = pending.round_id
    watch = Watcher(a, execution_id=execution_id)
    assert watch.take(1) == [("pending", round_id)]

    replicas.processes["b"].kill()  # SIGKILL: B's leases are never released
    b.close()
    (_c,) = replicas.start(c={"pool_size": 1, "lease_seconds": SHORT_LEASE})

    # A sweep (A's or C's, whichever replica notices first once B's lease ran out:
    # docs/how-it-works/status-and-sweeping.md) fails the round closed.
    for _ in range(600):
        recovered = get_round(a, round_id)
        if recovered.status != elicitation_pb2.MANAGED_INPUT_STATUS_PENDING:
            break
        time.sleep(0.05)
    assert recovered.status == elicitation_pb2.MANAGED_INPUT_STATUS_FAILED, recovered
    assert recovered.failure_code == "recovery_unavailable"

    result = a.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED
    assert result.failure_code == "recovery_unavailable"
    # One replica did it, once, and nothing else went wrong. Its pass recovers the
    # execution, or its round (which finishes the execution too) when the leases,
    # renewed together, lapsed between its query of executions and of rounds.
    recovery = replicas.complaints("a") + replicas.complaints("c")
    assert len(recovery) == 1, recovery
    assert all(
        f"execution_id={execution_id}" in line
        and ("event=execution.recovered" in line or "event=round.recovered" in line)
        for line in recovery
    ), recovery
    pending_now = a.elicitation.GetPending(
        elicitation_service_pb2.GetPendingRequest(execution_id=execution_id), timeout=30
    )
    assert not pending_now.HasField("round")
    assert watch.end() == [
        ("left", round_id, "MANAGED_INPUT_STATUS_FAILED"),
        finished(execution_id, FAILED),
    ]
    assert watch.error is None

    # A late answer, through the replica that never ran anything, cannot resume it.
    late = expect_failure(a.elicitation.Respond, respond_request(round_id, "late"), timeout=30)
    assert late.code == grpc.StatusCode.FAILED_PRECONDITION
    assert late.info.reason == "MANAGED_INPUT_RECOVERY_UNAVAILABLE"
    assert dict(late.info.metadata) == {"round_id": round_id, "execution_id": execution_id}
    assert late.detail(error_details_pb2.PreconditionFailure).violations


def test_resumable_round_of_a_killed_replica_is_answered_through_another(
    replicas: Replicas,
) -> None:
    """A 2026-07-28 round (binding pinned to it, server sealing with a fixed key)
    outlives its replica: the other one releases it, takes it over and sends
    the retry (see tests/api/test_round_resume.py for the single-service cases)."""
    tmp, ledger = replicas.tmp, replicas.tmp / "ledger.txt"
    # Not parked while it waits (park_after_seconds): the owner holds it when killed.
    options = {"pool_size": 1, "lease_seconds": SHORT_LEASE, "park_after": 86_400.0}
    for name in ("owner", "other"):
        config = resume_config(tmp, replicas.database, name=name, **options)
        replicas.processes[name] = ServerProcess(config, tmp / f"{name}.log")
    owner = replicas.processes["owner"].start().stubs()
    execution_id = submit_ledger(owner, ledger)
    round_id = owner.wait_pending(execution_id).round_id
    owner.close()
    other = replicas.processes["other"].start().stubs()
    replicas._stubs.append(other)

    replicas.processes["owner"].kill()  # SIGKILL: its leases are never released
    # Answered through the other replica, whether or not its recovery ran yet.
    answered = other.respond(round_id, "address-1")
    assert answered.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESPONSE_VALIDATED
    assert_resumed_once(other.result(execution_id), ledger)
    assert get_round(other, round_id).status == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED
    # The other replica's only complaint is the release of the dead one's work.
    complaints = replicas.complaints("other")
    assert complaints, "the other replica's recovery released the execution"
    assert all(
        f"event=execution.released execution_id={execution_id}" in line for line in complaints
    ), complaints


# -- 4. a replica hears the others' writes at once (LISTEN/NOTIFY) ---------------------------

# Polling so rare that only a notification explains a prompt wake: every wait
# below is bounded far below it (a functional bound, not a speed measurement).
RARE_POLL = 120.0
PROMPT = 30.0
HEARING = "LISTEN m3_changes: hearing other processes' changes"


def rare_polling(**options: Any) -> dict[str, Any]:
    return {"poll_interval": RARE_POLL, "listening_poll_interval": RARE_POLL, **options}


def wait_for_log(replicas: Replicas, name: str, text: str, count: int = 1) -> None:
    """Until `text` appears `count` times in the replica's log (bounded)."""
    log = replicas.tmp / f"{name}.log"
    for _ in range(600):
        if log.read_text().count(text) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} x{count} not in {name}'s log")


def respond_through_other_replica(owner: Stubs, other: Stubs) -> None:
    """A round run by `owner`, answered through `other`: the owner resumes it at once."""
    execution_id = owner.submit_managed()
    round_id = owner.wait_pending(execution_id).round_id
    started = time.monotonic()
    answered = other.respond(round_id, f"address-{round_id}")
    assert answered.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESPONSE_VALIDATED
    # Result through the answering replica: the owner's finish reaches it by NOTIFY too.
    result = other.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
    assert booked_text(result) == BOOKED
    assert time.monotonic() - started < PROMPT


def test_respond_through_one_replica_wakes_the_owner_at_once(replicas: Replicas) -> None:
    owner, other = replicas.start(owner=rare_polling(pool_size=1), other=rare_polling(**IDLE))
    for name in ("owner", "other"):
        wait_for_log(replicas, name, HEARING)
    respond_through_other_replica(owner, other)
    assert replicas.complaints("owner") == replicas.complaints("other") == []


def test_watch_on_one_replica_sees_a_round_created_on_another_at_once(
    replicas: Replicas,
) -> None:
    _worker, front = replicas.start(worker=rare_polling(pool_size=1), front=rare_polling(**IDLE))
    for name in ("worker", "front"):
        wait_for_log(replicas, name, HEARING)
    watch = Watcher(front)
    # Submitted through the replica without workers: the worker replica hears the
    # queued execution (its own claim loop polls only every RARE_POLL seconds).
    started = time.monotonic()
    execution_id = front.submit_managed()
    (event,) = watch.take(1)
    assert event[0] == "pending"
    assert time.monotonic() - started < PROMPT
    round_id = event[1]
    assert get_round(front, round_id).execution_id == execution_id

    front.respond(round_id, "watched")
    assert watch.take_until(finished(execution_id, SUCCEEDED)) == [
        ("left", round_id, "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"),
        finished(execution_id, SUCCEEDED),
    ]
    assert time.monotonic() - started < 2 * PROMPT
    watch.close()
    assert replicas.complaints("worker") == replicas.complaints("front") == []


def test_a_dropped_listener_reconnects_and_wakes_again(replicas: Replicas) -> None:
    owner, other = replicas.start(owner=rare_polling(pool_size=1), other=rare_polling(**IDLE))
    for name in ("owner", "other"):
        wait_for_log(replicas, name, HEARING)
    # Drop every replica's listening connection from the server side.
    admin = sa.create_engine(replicas.database, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            dropped = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE application_name = 'm3grpc-listen' AND datname = current_database()"
                )
            ).scalar_one()
    finally:
        admin.dispose()
    assert dropped == 2
    for name in ("owner", "other"):
        wait_for_log(replicas, name, "LISTEN m3_changes: connection lost")
        wait_for_log(replicas, name, HEARING, count=2)
    respond_through_other_replica(owner, other)
    # The lost connection is the only complaint.
    for name in ("owner", "other"):
        complaints = replicas.complaints(name)
        assert len(complaints) == 1 and "connection lost" in complaints[0], complaints
