"""Runtime fixtures: real test MCP servers over stdio, a real SQLite store, the kit."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from m3grpc import (
    ElicitationResponse,
    ExecutionHandle,
    ExecutionResult,
    MCPTestKit,
    PendingElicitationRound,
    StdioServer,
)
from m3grpc.servers import ServerBinding
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionStatus, FormElicitationRequest, HumanInput

MCP_SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"
T = TypeVar("T")


def mcp_server(name: str, variant: str = "legacy", *extra: str) -> StdioServer:
    """A binding that launches tests/mcp_servers/<name>.py over stdio."""
    return StdioServer(
        name=name,
        command=sys.executable,
        args=(str(MCP_SERVERS / f"{name}.py"), "--variant", variant, *extra),
    )


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "executions.sqlite"


@pytest.fixture
def store(store_path: Path) -> Iterator[SQLiteExecutionStore]:
    store = SQLiteExecutionStore(store_path)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def kit(store: SQLiteExecutionStore) -> Iterator[MCPTestKit]:
    with MCPTestKit(store=store, env={}, poll_interval=0.2) as kit:
        yield kit


def eventually(probe: Callable[[], T | None], *, timeout: float = 60.0, what: str = "") -> T:
    """Poll `probe` until it returns a value (bounded by `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value is not None:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or probe}")


def wait_pending(handle: ExecutionHandle, timeout: float = 60.0) -> PendingElicitationRound:
    def probe() -> PendingElicitationRound | None:
        pending = handle.pending_elicitation()
        if pending is None and handle.snapshot().lifecycle is ExecutionStatus.FINISHED:
            raise AssertionError(f"finished before asking: {handle.result(timeout=1)}")
        return pending

    return eventually(probe, timeout=timeout, what="a pending round")


def text_of(result: object) -> str:
    """The first text content of a recorded MCP tool/prompt/resource result."""
    assert isinstance(result, dict)
    for block in result.get("content") or result.get("messages") or result.get("contents") or []:
        if "text" in block:
            return str(block["text"])
        if isinstance(block.get("content"), dict) and "text" in block["content"]:
            return str(block["content"]["text"])
    raise AssertionError(f"no text in {result}")


ADDRESS = {"street": "1 Main Street", "city": "Pune"}
BOOKED = "booked shipment to 1 Main Street, Pune"


def confirmed_shipment_answers(pending: PendingElicitationRound) -> dict[str, ElicitationResponse]:
    """The answers to a round of the shipping server's `book_confirmed_shipment`: the
    confirmation where the form asks for `confirm`, the address everywhere else."""
    answers = {}
    for key, request in pending.requests.items():
        assert isinstance(request, FormElicitationRequest)
        fields = request.requested_schema["properties"]
        content = {"confirm": True} if "confirm" in fields else ADDRESS
        answers[key] = ElicitationResponse(action="accept", content=content)
    return answers


SHIPPING_PROMPT = "Ask for the delivery address, then book the shipment."


def submit_tool(
    kit: MCPTestKit,
    tool: str,
    *,
    variant: str = "legacy",
    prompt: str = SHIPPING_PROMPT,
    human_input: HumanInput = "managed",
    **options: Any,
) -> ExecutionHandle:
    """A scripted agent's run of `tool` ("<server>:<tool>" of a tests/mcp_servers server)."""
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    server = mcp_server(tool.split(":")[0], variant)
    handle: ExecutionHandle = agent.submit(
        prompt, server=server, tools=[tool], human_input=human_input, **options
    )
    return handle


def book_shipment_managed(kit: MCPTestKit, server: ServerBinding) -> tuple[str, ExecutionResult]:
    """The seed flow: submit managed, answer the address round; (round_id, result)."""
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    handle = agent.submit(
        "Book it.", server=server, tools=["shipping:book_shipment"], human_input="managed"
    )
    pending = wait_pending(handle)
    handle.respond_elicitation(
        pending.round_id,
        {"shipping_address": ElicitationResponse(action="accept", content=ADDRESS)},
        idempotency_key=f"address-{pending.round_id}",
    )
    return pending.round_id, handle.result(timeout=60)
