"""Two service replicas on one database: a worker replica that dies (SIGKILL)
while it owns a pending round, and an idle replica (no workers; its sweeper
recovers the dead one's round once that lease runs out) that a caller answers
through. Covers OPERATION_TIMEOUT and MANAGED_INPUT_RECOVERY_UNAVAILABLE, plus
concurrent responses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2

from .conftest import (
    Failure,
    ServerProcess,
    Stubs,
    expect_failure,
    failure,
    respond_request,
    start_server,
)

WORKER_LEASE = 3.0


@pytest.fixture(scope="module")
def idle_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("replicas")
    server = start_server(tmp, "idle", pool_size=0, lease_seconds=600)
    yield server, tmp
    server.terminate()


def _worker_dies_with_a_pending_round(
    tmp: Path, name: str, **agent: object
) -> tuple[str, str, float]:
    """Start a worker replica, get a pending round, SIGKILL the worker.
    Returns (execution_id, round_id, deadline as epoch seconds or 0)."""
    worker = start_server(tmp, name, pool_size=1, lease_seconds=WORKER_LEASE)
    stubs = worker.stubs()
    try:
        execution_id = stubs.submit_managed(**agent)
        pending = stubs.wait_pending(execution_id)
    finally:
        worker.kill()
        stubs.close()
    deadline = (
        pending.deadline.ToDatetime(tzinfo=UTC).timestamp() if pending.HasField("deadline") else 0.0
    )
    return execution_id, pending.round_id, deadline


def _respond_failure(server: ServerProcess, round_id: str, idempotency_key: str) -> Failure:
    """The typed failure of a Respond to `round_id` on `server`."""
    stubs = server.stubs()
    try:
        return expect_failure(stubs.elicitation.Respond, respond_request(round_id, idempotency_key))
    finally:
        stubs.close()


def test_operation_timeout(idle_replica: tuple[ServerProcess, Path]) -> None:
    server, tmp = idle_replica
    timeout = duration_pb2.Duration(seconds=1)
    execution_id, round_id, deadline = _worker_dies_with_a_pending_round(
        tmp, "worker-timeout", round_timeout=timeout
    )
    # Past the round's deadline, within the dead worker's lease.
    time.sleep(max(0.0, deadline - datetime.now(UTC).timestamp()) + 0.1)
    caught = _respond_failure(server, round_id, "late")
    assert caught.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert caught.info.reason == "OPERATION_TIMEOUT"
    assert dict(caught.info.metadata) == {"round_id": round_id, "execution_id": execution_id}


def test_recovery_unavailable(idle_replica: tuple[ServerProcess, Path]) -> None:
    server, tmp = idle_replica
    execution_id, round_id, _ = _worker_dies_with_a_pending_round(tmp, "worker-recovery")
    time.sleep(WORKER_LEASE + 0.3)  # let the dead worker's lease expire
    caught = _respond_failure(server, round_id, "orphan")
    assert caught.code == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.info.reason == "MANAGED_INPUT_RECOVERY_UNAVAILABLE"
    assert dict(caught.info.metadata) == {"round_id": round_id, "execution_id": execution_id}
    (violation,) = caught.detail(error_details_pb2.PreconditionFailure).violations
    assert (violation.type, violation.subject) == ("MANAGED_INPUT_RECOVERY_UNAVAILABLE", round_id)


def test_concurrent_responses_on_one_round(stubs: Stubs) -> None:
    execution_id = stubs.submit_managed()
    pending = stubs.wait_pending(execution_id)

    def respond(index: int) -> str:
        try:
            stubs.elicitation.Respond(respond_request(pending.round_id, f"key-{index}"), timeout=60)
        except grpc.RpcError as error:
            caught = failure(error)
            return f"{caught.code.name}/{caught.info.reason}"
        return "OK"

    with ThreadPoolExecutor(max_workers=20) as pool:
        outcomes = list(pool.map(respond, range(20)))
    assert outcomes.count("OK") == 1, outcomes
    assert set(outcomes) - {"OK"} <= {
        "FAILED_PRECONDITION/MANAGED_INPUT_STATE_INVALID",
        "ABORTED/MANAGED_INPUT_CONFLICT",
    }, outcomes
    result = stubs.result(execution_id)
    assert result.operations[0].ok
