"""Every round ends in the status its operation earned, and a finished
operation's result is durable when its round resolves (black box: `m3grpc
serve` subprocesses and the misbehaving servers of tests/mcp_servers/round_status.py).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.rpc import error_details_pb2

from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.support.mcp_processes import free_port, serve_http

from .conftest import (
    ADDRESS,
    BOOKED,
    SERVERS,
    ServerProcess,
    Stubs,
    expect_failure,
    write_config,
)

STDIO_BINDINGS = {"round_status": "legacy", "round_status_mrtr": "mrtr"}


def start(tmp: Path, *, name: str = "server", http_url: str | None = None) -> ServerProcess:
    """A serve process with the round_status bindings (and an HTTP one at `http_url`)."""
    path = write_config(tmp / f"{name}.toml", tmp / "m3.sqlite", lease_seconds=5.0)
    lines: list[str] = []
    for binding, variant in STDIO_BINDINGS.items():
        args = [str(SERVERS / "round_status.py"), "--variant", variant]
        lines += [
            f"[servers.{binding}]",
            f"command = {json.dumps(sys.executable)}",
            f"args = {json.dumps(args)}",
        ]
    if http_url is not None:
        lines += ["[servers.round_status_http]", f"url = {json.dumps(http_url)}"]
        lines += ['protocol = "legacy"']
    with path.open("a") as config:
        config.write("\n".join(lines) + "\n")
    return ServerProcess(path, tmp / f"{name}.log").start()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = start(tmp_path)
    try:
        yield process
    finally:
        process.kill()


def step(name: str, **arguments: Any) -> execution_pb2.OperationStep:
    struct = struct_pb2.Struct()
    struct.update(arguments)
    return execution_pb2.OperationStep(
        kind=execution_pb2.OPERATION_KIND_TOOL, name=name, arguments=struct
    )


def submit(stubs: Stubs, server: str, *steps: execution_pb2.OperationStep) -> str:
    spec = execution_pb2.AgentSpec(
        harness="scripted",
        server=server,
        tools=[f"{server}:{s.name}" for s in steps],
        prompt="Run the script.",
        script=list(steps),
    )
    response = stubs.executions.Submit(
        execution_service_pb2.SubmitRequest(
            agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
        ),
        timeout=30,
    )
    return str(response.execution_id)


def get_round(stubs: Stubs, round_id: str) -> elicitation_pb2.ElicitationRound:
    return stubs.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
    ).round


def wait_for_file(path: Path, attempts: int = 2400) -> None:
    for _ in range(attempts):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def rounds_of(stubs: Stubs, execution_id: str) -> list[elicitation_pb2.ElicitationRound]:
    return list(
        stubs.elicitation.ListRounds(
            elicitation_service_pb2.ListRoundsRequest(execution_id=execution_id), timeout=30
        ).rounds
    )


# -- item 1: nothing undeliverable is ever acknowledged ------------------------------------


@pytest.mark.parametrize("binding", ["round_status", "round_status_mrtr"])
def test_a_schema_mcp_does_not_allow_is_refused_before_it_becomes_a_round(
    stubs: Stubs, binding: str
) -> None:
    execution_id = submit(stubs, binding, step("nested_form"))
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED
    assert result.failure_code == "invalid_elicitation_schema"
    assert "'address'" in result.failure_message
    (operation,) = result.operations
    assert operation.failure_code == "invalid_elicitation_schema"
    assert rounds_of(stubs, execution_id) == []


def test_content_an_elicit_result_cannot_carry_is_rejected(stubs: Stubs) -> None:
    # The pydantic schema allows extra properties, but MCP content is flat: a
    # nested value would be acknowledged, then fail on delivery.
    execution_id = stubs.submit_managed()
    pending = stubs.wait_pending(execution_id)
    bad = expect_failure(
        stubs.respond, pending.round_id, "nested", {**ADDRESS, "extra": {"floor": 2}}
    )
    assert bad.code == grpc.StatusCode.INVALID_ARGUMENT
    assert bad.info.reason == "MANAGED_INPUT_INVALID"
    fields = [v.field for v in bad.detail(error_details_pb2.BadRequest).field_violations]
    assert any("extra" in field for field in fields), fields
    assert get_round(stubs, pending.round_id).status == elicitation_pb2.MANAGED_INPUT_STATUS_PENDING

    stubs.respond(pending.round_id, "flat")
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    assert result.operations[0].result["structuredContent"]["result"] == BOOKED


# -- item 2: a round's status follows its operation ----------------------------------------


def test_a_round_fails_with_its_operation_when_the_server_exits_after_the_answer(
    stubs: Stubs,
) -> None:
    execution_id = submit(stubs, "round_status", step("exit_after_answer"))
    pending = stubs.wait_pending(execution_id)
    stubs.respond(pending.round_id, "address")
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED
    assert result.failure_code == "connection_closed"
    record = get_round(stubs, pending.round_id)
    assert record.status == elicitation_pb2.MANAGED_INPUT_STATUS_FAILED
    assert record.failure_code == "connection_closed"


def test_a_legacy_round_is_delivered_while_the_tool_still_runs(
    stubs: Stubs, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    execution_id = submit(stubs, "round_status", step("hold_after_answer", marker_dir=str(markers)))
    pending = stubs.wait_pending(execution_id)
    stubs.respond(pending.round_id, "address")
    wait_for_file(markers / "answered")  # the server has the answer; the tool waits
    assert (
        get_round(stubs, pending.round_id).status == elicitation_pb2.MANAGED_INPUT_STATUS_DELIVERED
    )

    (markers / "release").write_text("release")
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    record = get_round(stubs, pending.round_id)
    assert record.status == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED
    assert record.failure_code == ""


# -- item 7: a finished operation's result survives a crash ---------------------------------


def test_a_finished_operations_result_survives_a_crash_before_the_next_one_ends(
    tmp_path: Path,
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    first = start(tmp_path)
    try:
        stubs = first.stubs()
        execution_id = submit(
            stubs, "round_status", step("ask_address"), step("hold", marker_dir=str(markers))
        )
        pending = stubs.wait_pending(execution_id)
        stubs.respond(pending.round_id, "address")
        wait_for_file(markers / "holding")  # op-0 returned; op-1 runs
        stubs.close()
        first.kill()  # SIGKILL
    finally:
        (markers / "release").write_text("release")
        first.kill()

    second = start(tmp_path, name="restarted")
    try:
        stubs = second.stubs()
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_FAILED
        assert result.failure_code == "recovery_unavailable"
        (operation,) = result.operations  # op-1 never finished
        assert operation.ok
        assert operation.logical_operation_id == "op-0"
        assert operation.result["structuredContent"]["result"] == BOOKED
        assert (
            get_round(stubs, pending.round_id).status
            == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED
        )
        stubs.close()
    finally:
        second.kill()


@contextmanager
def held_close_http_server(markers: Path) -> Iterator[str]:
    """round_status over Streamable HTTP whose session DELETE waits for `markers/release`."""
    port = free_port()
    command = [sys.executable, str(SERVERS / "round_status.py"), "--http", "--port", str(port)]
    with serve_http([*command, "--hold-close", str(markers)], port) as url:
        try:
            yield url
        finally:
            (markers / "release").write_text("release")


def test_a_completed_execution_survives_a_crash_while_its_session_closes(
    tmp_path: Path,
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    with held_close_http_server(markers) as url:
        first = start(tmp_path, http_url=url)
        try:
            stubs = first.stubs()
            execution_id = submit(stubs, "round_status_http", step("ask_address"))
            pending = stubs.wait_pending(execution_id)
            stubs.respond(pending.round_id, "address")
            # The tool returned and the worker is closing the MCP session (the
            # server holds the DELETE): the crash comes before the execution finishes.
            wait_for_file(markers / "closing")
            assert (
                get_round(stubs, pending.round_id).status
                == elicitation_pb2.MANAGED_INPUT_STATUS_RESOLVED
            )
            stubs.close()
        finally:
            first.kill()  # SIGKILL

        second = start(tmp_path, name="restarted", http_url=url)
        try:
            stubs = second.stubs()
            result = stubs.result(execution_id)
            # Every operation completed before the crash: recovery finishes the
            # execution with the outcome and results they earned.
            assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
            assert result.failure_code == ""
            (operation,) = result.operations
            assert operation.ok
            assert operation.result["structuredContent"]["result"] == BOOKED
            stubs.close()
        finally:
            second.kill()
