"""Hostile load, black-box: an oversized Submit, a stalled service process and
more paused executions than worker slots never cost a healthy execution.

Every wait is a bounded loop; nothing asserts on elapsed time.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import (
    BOOKED,
    ServerProcess,
    Stubs,
    expect_failure,
    failure,
    write_config,
)


def _server(
    tmp: Path,
    *,
    workers: list[str] | None = None,
    limits: list[str] | None = None,
    **config: Any,
) -> ServerProcess:
    """A server of its own; `workers` adds lines to its [workers] table, `limits`
    makes a [limits] table."""
    path = write_config(tmp / "server.toml", tmp / "m3.sqlite", **config)
    if workers:
        text = path.read_text().replace("[workers]\n", "[workers]\n" + "\n".join(workers) + "\n")
        path.write_text(text)
    if limits:
        path.write_text(path.read_text() + "[limits]\n" + "\n".join(limits) + "\n")
    return ServerProcess(path, tmp / "server.log").start()


@contextlib.contextmanager
def _running(tmp: Path, **config: Any) -> Iterator[tuple[ServerProcess, Stubs]]:
    server = _server(tmp, **config)
    stubs = server.stubs()
    try:
        yield server, stubs
    finally:
        stubs.close()
        server.kill()


def _answer_and_succeed(stubs: Stubs, execution_id: str, round_id: str) -> None:
    stubs.respond(round_id, f"address-{round_id}")
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
    assert result.operations[0].result["structuredContent"]["result"] == BOOKED


def _refused_fields(stubs: Stubs, agent: execution_pb2.AgentSpec, *, timeout: float) -> list[str]:
    """The field violations of a managed Submit of `agent` refused as INVALID_ARGUMENT."""
    refused = expect_failure(
        stubs.executions.Submit,
        execution_service_pb2.SubmitRequest(
            agent=agent, human_input=execution_pb2.HUMAN_INPUT_MANAGED
        ),
        timeout=timeout,
    )
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT
    return [v.field for v in refused.detail(error_details_pb2.BadRequest).field_violations]


def test_oversized_spec_is_refused_while_another_execution_waits(tmp_path: Path) -> None:
    with _running(tmp_path, lease_seconds=3.0) as (_server_process, stubs):
        execution_id = stubs.submit_managed()
        pending = stubs.wait_pending(execution_id)
        # 100,000 tool entries: used to be accepted and then block the service's
        # event loop for minutes (quadratic de-duplication), expiring leases.
        agent = execution_pb2.AgentSpec(
            harness="scripted",
            server="shipping",
            tools=[f"shipping:tool_{index}" for index in range(100_000)],
            prompt="Call every tool.",
        )
        fields = _refused_fields(stubs, agent, timeout=60)
        assert any(field.endswith("tools") for field in fields), fields
        # The waiting execution is untouched: still pending, answerable, successful.
        assert stubs.wait_pending(execution_id).round_id == pending.round_id
        _answer_and_succeed(stubs, execution_id, pending.round_id)


def test_a_stalled_process_keeps_its_own_waiting_execution(tmp_path: Path) -> None:
    # SIGSTOP stalls the whole service process (its event loop included) far past
    # its lease; a live owner must renew on waking, and its own recovery must not
    # fail the execution that waits for a human.
    with _running(tmp_path, lease_seconds=2.0) as (running, stubs):
        execution_id = stubs.submit_managed()
        pending = stubs.wait_pending(execution_id)
        assert running.process is not None
        running.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(6.0)  # three lease durations: a real stall, not a measurement
        finally:
            running.process.send_signal(signal.SIGCONT)
        # Until the heartbeat has renewed, a response may be refused as unowned;
        # the round is never failed.
        for _ in range(100):
            try:
                stubs.respond(pending.round_id, f"address-{pending.round_id}")
                break
            except grpc.RpcError as error:
                refused = failure(error)
                assert refused.info.reason == "MANAGED_INPUT_RECOVERY_UNAVAILABLE", refused
                time.sleep(0.1)
        else:
            raise AssertionError("the stalled process never renewed its lease")
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result


def test_paused_executions_hold_no_worker_slot(tmp_path: Path) -> None:
    with _running(tmp_path, pool_size=2) as (_server_process, stubs):
        # Six executions wait for a human with only two slots: all of them run.
        paused = [stubs.submit_managed() for _ in range(6)]
        rounds = {execution_id: stubs.wait_pending(execution_id) for execution_id in paused}
        # A new Submit still runs to completion.
        quote = stubs.executions.Submit(
            execution_service_pb2.SubmitRequest(
                agent=execution_pb2.AgentSpec(
                    harness="scripted",
                    server="shipping",
                    tools=["shipping:quote"],
                    prompt="Quote a shipment.",
                )
            ),
            timeout=30,
        ).execution_id
        result = stubs.result(quote)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
        # Every paused execution takes a slot again to finish.
        for execution_id, pending in rounds.items():
            _answer_and_succeed(stubs, execution_id, pending.round_id)


def test_server_default_and_maximum_round_timeout(tmp_path: Path) -> None:
    with _running(
        tmp_path,
        workers=["default_round_timeout_seconds = 1.0", "max_round_timeout_seconds = 60.0"],
    ) as (_server_process, stubs):
        # No round_timeout in the spec: the server's default deadline applies.
        execution_id = stubs.submit_managed()
        pending = stubs.wait_pending(execution_id)
        assert pending.HasField("deadline")
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED
        assert result.failure_code == "operation_timeout"
        # Above the server's maximum: refused at Submit.
        agent = execution_pb2.AgentSpec(
            harness="scripted", server="shipping", tools=["shipping:book_shipment"]
        )
        agent.round_timeout.FromSeconds(61)
        fields = _refused_fields(stubs, agent, timeout=30)
        assert any("round_timeout" in field for field in fields), fields


def test_a_long_script_result_stays_readable(tmp_path: Path) -> None:
    # Operations past the stored-result budget are counted, not stored: the
    # execution's Result stays far below the message limit.
    with _running(tmp_path, limits=["max_result_bytes = 2000"]) as (_server_process, stubs):
        step = execution_pb2.OperationStep(kind=execution_pb2.OPERATION_KIND_TOOL, name="quote")
        agent = execution_pb2.AgentSpec(
            harness="scripted",
            server="shipping",
            tools=["shipping:quote"],
            prompt="Quote many shipments.",
            script=[step] * 30,
        )
        execution_id = stubs.executions.Submit(
            execution_service_pb2.SubmitRequest(agent=agent), timeout=30
        ).execution_id
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
        *kept, omitted = result.operations
        assert kept and all(operation.ok for operation in kept)
        assert omitted.logical_operation_id == "m3_omitted"
        assert omitted.ok
        assert len(kept) + omitted.result["omitted_operations"] == 30


def test_list_rounds_pages_stay_under_the_message_limit(tmp_path: Path) -> None:
    # Each accepted answer is within the content limit, but its 1,200 long
    # content keys come back (redacted) from ListRounds: 20 such rounds used to
    # make one page larger than gRPC's 4 MB message limit.
    content: dict[str, Any] = {"answer": "yes"}
    content.update({f"{index:04d}{'k' * 196}": 0 for index in range(1200)})
    with _running(tmp_path) as (_server_process, stubs):
        agent = execution_pb2.AgentSpec(
            harness="scripted",
            server="shipping",
            tools=["shipping:keep_asking"],
            prompt="Answer every question.",
            round_limit=25,
        )
        execution_id = stubs.executions.Submit(
            execution_service_pb2.SubmitRequest(
                agent=agent, human_input=execution_pb2.HUMAN_INPUT_MANAGED
            ),
            timeout=30,
        ).execution_id
        answered: set[str] = set()
        while len(answered) < 20:
            pending = stubs.wait_pending(execution_id)
            if pending.round_id in answered:
                time.sleep(0.05)
                continue
            key = f"wide-{pending.round_id}"
            stubs.respond(pending.round_id, key, content, request_key="answer")
            answered.add(pending.round_id)
        pending = stubs.wait_pending(execution_id)
        while pending.round_id in answered:
            time.sleep(0.05)
            pending = stubs.wait_pending(execution_id)
        stubs.respond(
            pending.round_id,
            "stop",
            action=elicitation_pb2.ELICITATION_ACTION_DECLINE,
            request_key="answer",
        )
        assert stubs.result(execution_id).outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
        seen: list[str] = []
        token = ""
        for _ in range(20):
            page = stubs.elicitation.ListRounds(
                elicitation_service_pb2.ListRoundsRequest(page_size=1000, page_token=token),
                timeout=60,
            )
            seen += [round_.round_id for round_ in page.rounds]
            token = page.next_page_token
            if not token:
                break
        assert len(seen) == len(set(seen)) == 21
        assert answered <= set(seen)
