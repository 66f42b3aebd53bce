"""The scenarios of the harness matrix (cells.py), each run by every harness's test module.

A test module (test_scripted.py, test_codex.py, test_claude_code.py) imports these tests
and provides the `agent` fixture; the `kit` fixture (conftest.py) is an embedded kit on a
real SQLite file. Servers are real MCP servers over stdio, written the way their SDKs'
documentation writes them (tests/mcp_servers/booking.py, booking.mjs, server-everything);
each cell asserts the outcome cells.py declares, and for a success what reached the
server and, through an agent, what its model received.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from m3grpc import ElicitationResponse, ManagedInputValidationError, MCPTestKit
from m3grpc.client import RemoteMCPTestKit
from m3grpc.servers import StdioServer
from m3grpc.types import (
    ExecutionResult,
    ExecutionStatus,
    FormElicitationRequest,
    ManagedInputStatus,
    PendingElicitationRound,
    UrlElicitationRequest,
)
from tests.api.conftest import ServerProcess, add_servers, write_config
from tests.harness.matrix.agents import Agent, path_of
from tests.harness.matrix.cells import GENERATIONS, LEGACY, expected
from tests.support.agents import running
from tests.support.everything import VALID_ANSWER, everything_stdio
from tests.support.node import node_tools

BOOKING = {"name": "Ada", "seating": "outdoor", "high_chair": True, "guests": 4, "note": "window"}
BOOKED = "booked a table for 4 (outdoor, high chair) under Ada; note: window"
FORM_FIELDS = {"name", "seating", "high_chair", "guests", "note"}
ADDRESS = {"street": "1 Main Street", "city": "Pune"}
WAIT = 180.0
LEASE_SECONDS = 3.0


def python_server(name: str, generation: str) -> StdioServer:
    """tests/mcp_servers/<name>.py over stdio, its binding pinned to `generation`."""
    variant = "legacy" if generation == LEGACY else "mrtr"
    return StdioServer(
        name=name,
        command=sys.executable,
        args=[str(path_of(f"{name}.py")), "--variant", variant],
        protocol="legacy" if generation == LEGACY else "2026-07-28",
    )


def wait_round(
    handle: Any, after: PendingElicitationRound | None = None
) -> PendingElicitationRound:
    """The execution's pending round (another than `after`), bounded by WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        pending = handle.pending_elicitation()
        if pending is not None and (after is None or pending.round_id != after.round_id):
            return pending
        if handle.snapshot().lifecycle is ExecutionStatus.FINISHED:
            raise AssertionError(f"finished before asking: {handle.result(timeout=5)}")
        time.sleep(0.05)
    raise AssertionError("no pending round")


def answer(handle: Any, pending: PendingElicitationRound, responses: Mapping[str, Any]) -> None:
    handle.respond_elicitation(
        pending.round_id,
        {key: ElicitationResponse.model_validate(value) for key, value in responses.items()},
        idempotency_key=f"matrix-{pending.round_id}",
    )


def finish(agent: Agent, handle: Any, scenario: str, generation: str) -> ExecutionResult:
    """The execution's result, which must be what the cell declares."""
    result: ExecutionResult = handle.result(timeout=WAIT)
    cell = expected(scenario, agent.name, generation)
    assert (result.outcome.value, result.failure_code) == (cell.outcome, cell.failure_code), result
    assert agent.processes() == []  # nothing of the agent is left running
    return result


def text_of(result: ExecutionResult, index: int = -1) -> str:
    operation = result.operations[index]
    assert operation.result is not None, operation
    return str(operation.result["content"][0]["text"])


def reached_the_model(agent: Agent, result: ExecutionResult, text: str) -> None:
    """An agent's model received the server's output as the tool result, and quoted it."""
    if agent.is_agent:
        assert text in agent.last_tool_result()
        assert result.agent is not None and result.agent.final_message == f"Done: {text}"


# -- answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
def test_answer(agent: Agent, kit: MCPTestKit, generation: str, action: str) -> None:
    handle = agent.submit(kit, python_server("booking", generation), [("book_table", {})])
    pending = wait_round(handle)
    [(key, request)] = pending.requests.items()
    assert key == "table_booking"
    assert isinstance(request, FormElicitationRequest)
    assert request.message == "How should the table be booked?"
    assert set(request.requested_schema["properties"]) == FORM_FIELDS
    if generation == LEGACY:  # the server's own schema, title and all (2026-07-28 has none)
        assert request.requested_schema["title"] == "TableBooking"
    answer(
        handle,
        pending,
        {key: {"action": action, "content": BOOKING if action == "accept" else None}},
    )
    scenario = {"accept": "accept", "decline": "decline", "cancel": "cancel_answer"}[action]
    result = finish(agent, handle, scenario, generation)
    words = {"accept": BOOKED, "decline": "no booking: declined", "cancel": "no booking: cancelled"}
    assert text_of(result) == words[action]
    reached_the_model(agent, result, words[action])


@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
def test_typescript(agent: Agent, kit: MCPTestKit, action: str) -> None:
    server = StdioServer(
        name="booking",
        command=node_tools()["M3_SYSTEM_NODE"],
        args=[str(path_of("booking.mjs"))],
        protocol="legacy",
    )
    handle = agent.submit(kit, server, [("book_table", {})])
    pending = wait_round(handle)
    [(key, request)] = pending.requests.items()
    assert key == "input"  # no title, no M3 `_meta`: the default key
    assert isinstance(request, FormElicitationRequest)
    assert request.requested_schema["additionalProperties"] is False  # zod's, kept
    content = BOOKING if action == "accept" else None
    answer(handle, pending, {key: {"action": action, "content": content}})
    result = finish(agent, handle, "typescript", LEGACY)
    words = {"accept": BOOKED, "decline": "no booking: declined", "cancel": "no booking: cancelled"}
    assert text_of(result) == words[action]
    reached_the_model(agent, result, words[action])


@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
def test_everything(agent: Agent, kit: MCPTestKit, action: str) -> None:
    handle = agent.submit(kit, everything_stdio(), [("trigger-elicitation-request", {})])
    pending = wait_round(handle)
    [(key, request)] = pending.requests.items()
    assert isinstance(request, FormElicitationRequest)
    assert len(request.requested_schema["properties"]) == 13
    content = VALID_ANSWER if action == "accept" else None
    answer(handle, pending, {key: {"action": action, "content": content}})
    result = finish(agent, handle, "everything", LEGACY)
    assert result.operations[-1].result is not None
    texts = [block["text"] for block in result.operations[-1].result["content"]]
    if action == "accept":
        assert texts[0].startswith("✅ User provided the requested information!")
        assert "ada@example.org" in texts[1]
    else:
        assert action in " ".join(texts).lower(), texts


@pytest.mark.parametrize("generation", GENERATIONS)
def test_form_invalid_first(agent: Agent, kit: MCPTestKit, generation: str) -> None:
    handle = agent.submit(kit, python_server("booking", generation), [("book_table", {})])
    pending = wait_round(handle)
    with pytest.raises(ManagedInputValidationError) as refused:
        answer(
            handle,
            pending,
            {"table_booking": {"action": "accept", "content": {**BOOKING, "guests": 40}}},
        )
    fields = {violation.field for violation in refused.value.field_violations}
    assert fields == {"responses['table_booking'].content.guests"}
    assert handle.pending_elicitation() == pending  # still pending, unchanged
    answer(handle, pending, {"table_booking": {"action": "accept", "content": BOOKING}})
    result = finish(agent, handle, "form_invalid_first", generation)
    assert text_of(result) == BOOKED


@pytest.mark.parametrize("generation", GENERATIONS)
def test_two_rounds(agent: Agent, kit: MCPTestKit, generation: str) -> None:
    handle = agent.submit(
        kit, python_server("shipping", generation), [("book_confirmed_shipment", {})]
    )
    first = wait_round(handle)
    assert list(first.requests) == ["shipping_address"]
    answer(handle, first, {"shipping_address": {"action": "accept", "content": ADDRESS}})
    second = wait_round(handle, after=first)
    assert list(second.requests) == ["confirmation"]
    assert second.logical_operation_id == first.logical_operation_id
    answer(handle, second, {"confirmation": {"action": "accept", "content": {"confirm": True}}})
    result = finish(agent, handle, "two_rounds", generation)
    assert text_of(result) == "booked shipment to 1 Main Street, Pune"
    assert (
        kit.store.managed_input_store.get_round(first.round_id).status
        is ManagedInputStatus.RESOLVED
    )


@pytest.mark.parametrize("generation", GENERATIONS)
def test_url_mode(agent: Agent, kit: MCPTestKit, generation: str) -> None:
    handle = agent.submit(kit, python_server("payment", generation), [("authorize_payment", {})])
    pending = wait_round(handle)
    [(key, request)] = pending.requests.items()
    assert key == ("payment-authorization" if generation == LEGACY else "payment_authorization")
    assert isinstance(request, UrlElicitationRequest)
    assert request.url == "https://pay.example.test/authorize"
    answer(handle, pending, {key: {"action": "accept"}})
    result = finish(agent, handle, "url_mode", generation)
    assert text_of(result) == "payment authorized: 10.0"
    reached_the_model(agent, result, "payment authorized: 10.0")


def test_url_required(agent: Agent, kit: MCPTestKit) -> None:
    handle = agent.submit(kit, python_server("url_required", LEGACY), [("open_vault", {})])
    pending = wait_round(handle)
    [(key, request)] = pending.requests.items()
    assert key == "vault-login"
    assert isinstance(request, UrlElicitationRequest)
    answer(handle, pending, {key: {"action": "accept"}})
    result = finish(agent, handle, "url_required", LEGACY)
    assert text_of(result) == "vault main opened"


# -- stopping --------------------------------------------------------------------------------


@pytest.mark.parametrize("generation", GENERATIONS)
def test_handle_cancel(agent: Agent, kit: MCPTestKit, generation: str) -> None:
    handle = agent.submit(kit, python_server("booking", generation), [("book_table", {})])
    pending = wait_round(handle)
    handle.cancel()
    result = finish(agent, handle, "handle_cancel", generation)
    [operation] = result.operations  # the call cut short is listed
    assert (operation.operation_name, operation.failure_code) == ("book_table", "cancelled")
    record = kit.store.managed_input_store.get_round(pending.round_id)
    assert (record.status, record.failure_code) == (ManagedInputStatus.FAILED, "cancelled")


@pytest.mark.parametrize("generation", GENERATIONS)
def test_deadline(agent: Agent, kit: MCPTestKit, generation: str) -> None:
    handle = agent.submit(
        kit, python_server("booking", generation), [("book_table", {})], round_timeout_seconds=1.0
    )
    pending = wait_round(handle)
    result = finish(agent, handle, "deadline", generation)
    record = kit.store.managed_input_store.get_round(pending.round_id)
    assert (record.status, record.failure_code) == (ManagedInputStatus.FAILED, "operation_timeout")
    assert [op.failure_code for op in result.operations] == ["operation_timeout"]


def test_unselected_tool(agent: Agent, kit: MCPTestKit) -> None:
    handle = agent.submit(
        kit,
        python_server("shipping", LEGACY),
        [("book_shipment", {}), ("quote", {})],
        tools=["shipping:quote"],
    )
    result = finish(agent, handle, "unselected_tool", LEGACY)
    # The unselected tool never ran: it would have asked for an address.
    assert kit.store.managed_input_store.list_rounds(execution_id=handle.execution_id) == []
    calls = [(op.operation_name, op.failure_code) for op in result.operations]
    if agent.is_agent:  # offered only the selection; the model's stray call went nowhere
        assert agent.offered_mcp_tools() == ["quote"]
        assert calls == [("quote", None)]
    else:
        assert calls == [("book_shipment", "tool_not_selected"), ("quote", None)]


@pytest.mark.parametrize("generation", GENERATIONS)
def test_sigkill(
    agent: Agent, tmp_path: Path, generation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`m3grpc serve` runs the harness; it is SIGKILLed while the round waits, and the
    next worker's recovery settles the execution (nothing of the agent, and no MCP
    server it used, survives)."""
    cell = expected("sigkill", agent.name, generation)
    if cell.covered_by is not None:
        pytest.skip(f"covered by {cell.covered_by}")
    for name, value in agent.service_env.items():
        monkeypatch.setenv(name, value)
    pid_file = tmp_path / "server.pid"
    binding = python_server("booking", generation)
    binding = binding.model_copy(update={"args": (*binding.args, "--pid-file", str(pid_file))})
    with service(tmp_path, "worker", binding) as worker:
        with RemoteMCPTestKit(worker.address) as remote:
            handle = agent.submit(remote, binding.name, [("book_table", {})])
            wait_round(handle)
        if agent.is_agent:
            assert agent.processes() != []
        worker.kill()  # SIGKILL: no clean-up code of the worker runs
    bounded(lambda: agent.processes() == [], "the agent to die with its worker")
    server_pid = int(pid_file.read_text())
    bounded(lambda: not running(server_pid), "the MCP server to exit")
    time.sleep(LEASE_SECONDS + 0.5)  # the dead worker's lease expires
    with (
        service(tmp_path, "replacement", binding) as replacement,
        RemoteMCPTestKit(replacement.address) as remote,
    ):
        result = remote.handle(handle.execution_id).result(timeout=WAIT)
    assert (result.outcome.value, result.failure_code) == (cell.outcome, cell.failure_code)


def service_config(tmp_path: Path, name: str, binding: StdioServer) -> Path:
    config = write_config(
        tmp_path / f"{name}.toml", tmp_path / "m3.sqlite", pool_size=1, lease_seconds=LEASE_SECONDS
    )
    add_servers(
        config,
        {
            binding.name: {
                "command": binding.command,
                "args": list(binding.args),
                "protocol": binding.protocol,
            }
        },
    )
    return config


@contextmanager
def service(tmp_path: Path, name: str, binding: StdioServer) -> Iterator[ServerProcess]:
    """`m3grpc serve` with `binding`, on the test's one database, stopped on exit."""
    process = ServerProcess(service_config(tmp_path, name, binding), tmp_path / f"{name}.log")
    process.start()
    try:
        yield process
    finally:
        process.terminate()


def bounded(probe: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
