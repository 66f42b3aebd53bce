"""The `codex` harness through the gRPC service: a worker killed (SIGKILL) while Codex waits
on an elicitation leaves a round that recovery fails closed, and takes no agent with it.

The service's codex harness talks to the fake model (m3grpc.devtools.fake_model, the loopback
stand-in for a hosted LLM) through M3_CODEX_* variables, which the service inherits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from m3grpc.devtools.fake_model import FAKE_API_KEY, FAKE_MODEL_NAME, FakeModel
from m3grpc.wire.gen.m3.v1 import execution_pb2, execution_service_pb2
from tests.support.codex import codex_binary, codex_processes, homes_of

from .conftest import Stubs, expect_failure, respond_request, start_server

WORKER_LEASE = 3.0


@pytest.fixture(scope="module", autouse=True)
def fake_model_env() -> Iterator[FakeModel]:
    with FakeModel() as model, pytest.MonkeyPatch.context() as env:
        env.setenv("M3_CODEX_BASE_URL", model.base_url)
        env.setenv("M3_CODEX_ENV_KEY", "M3_FAKE_MODEL_KEY")
        env.setenv("M3_FAKE_MODEL_KEY", FAKE_API_KEY)
        yield model


def submit_codex(stubs: Stubs) -> str:
    spec = execution_pb2.AgentSpec(
        harness="codex",
        models=[FAKE_MODEL_NAME],
        server="example",
        tools=["example:book_shipment"],
        prompt="Ask for the delivery address, then book the shipment.",
    )
    response = stubs.executions.Submit(
        execution_service_pb2.SubmitRequest(
            agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
        ),
        timeout=30,
    )
    return str(response.execution_id)


def test_sigkill_while_codex_waits_recovers_closed(tmp_path: Path) -> None:
    codex_bin = codex_binary()
    worker = start_server(tmp_path, "worker", pool_size=1, lease_seconds=WORKER_LEASE)
    stubs = worker.stubs()
    try:
        execution_id = submit_codex(stubs)
        pending = stubs.wait_pending(execution_id, attempts=2400)
        assert codex_processes(codex_bin) != []
        assert worker.process is not None
        worker_pid = worker.process.pid
        assert homes_of(worker_pid) != []
    finally:
        worker.kill()  # SIGKILL: no cleanup code of the worker runs
        stubs.close()

    # Codex dies with the worker (parent-death signal), bounded wait.
    for _ in range(200):
        if not codex_processes(codex_bin):
            break
        time.sleep(0.05)
    assert codex_processes(codex_bin) == []

    time.sleep(WORKER_LEASE + 0.3)  # let the dead worker's lease expire
    replacement = start_server(tmp_path, "replacement", pool_size=1, lease_seconds=WORKER_LEASE)
    stubs = replacement.stubs()
    try:
        # The replacement's harness removed the dead worker's temporary CODEX_HOME.
        assert homes_of(worker_pid) == []
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED
        assert result.failure_code == "recovery_unavailable"
        caught = expect_failure(
            stubs.elicitation.Respond, respond_request(pending.round_id, "late")
        )
        assert caught.code == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        stubs.close()
        replacement.terminate()
