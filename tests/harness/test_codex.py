"""The `codex` harness end to end: the real `codex app-server` (npm @openai/codex, installed by
scripts/setup-codex.sh), real MCP servers over stdio, real SQLite. The only stand-in is the
hosted LLM: `m3grpc.devtools.fake_model.FakeModel`, a loopback Responses API server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from m3grpc import ElicitationResponse, MCPTestKit, StdioServer
from m3grpc.devtools.fake_model import (
    FAKE_MODEL_NAME,
    CallTool,
    Fail,
    FakeModel,
    RunCommand,
    offered_tools,
)
from m3grpc.harness import HarnessTask
from m3grpc.harness.codex import CodexSettings, codex_config
from m3grpc.servers import HttpServer
from m3grpc.types import ExecutionOutcome, ManagedInputStatus
from tests.runtime.conftest import eventually, mcp_server, wait_pending
from tests.support.codex import KEY_VAR, assert_nothing_left, codex_processes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SERVER = ROOT / "examples" / "shipping_server.py"
# shared/ sits beside the checkout (CI, /work/main) or one level up (/work/wt/<name>).
SPECS = [
    base / "shared" / "spec" / "managed-elicitation-input.txt"
    for base in (ROOT.parent, ROOT.parent.parent)
]
ADDRESS = {"street": "1 Main Street", "city": "Pune"}
PROMPT = "Ask for the delivery address, then book the shipment."


@pytest.fixture
def kit(codex_kit: MCPTestKit) -> MCPTestKit:
    return codex_kit


def example_server() -> StdioServer:
    return StdioServer(
        name="shipping", command=sys.executable, args=[str(EXAMPLE_SERVER)], protocol="legacy"
    )


def submit(kit: MCPTestKit, server: StdioServer, **options: Any) -> Any:
    agent = kit.agents([{"harness": "codex", "models": [FAKE_MODEL_NAME]}])[0]
    options.setdefault("tools", ["shipping:book_shipment"])
    options.setdefault("human_input", "managed")
    return agent.submit(PROMPT, server=server, **options)


def answer(handle: Any, response: ElicitationResponse) -> Any:
    pending = wait_pending(handle, timeout=120)
    handle.respond_elicitation(
        pending.round_id,
        {"shipping_address": response},
        idempotency_key=f"answer-{pending.round_id}",
    )
    return pending


# -- managed rounds ---------------------------------------------------------------------------


def test_managed_round_through_codex(kit: MCPTestKit, codex_bin: str) -> None:
    handle = submit(kit, example_server())
    pending = answer(handle, ElicitationResponse(action="accept", content=ADDRESS))
    result = handle.result(timeout=120)

    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert pending.operation_kind == "tool"
    assert (pending.server, pending.operation_name) == ("shipping", "book_shipment")
    request = pending.requests["shipping_address"]
    assert request.mode == "form"
    assert request.meta is None  # the key comes from the SDK's title, not from `_meta`
    assert request.requested_schema["title"] == "ShippingAddress"
    assert set(request.requested_schema["properties"]) == {"street", "city"}
    [operation] = result.operations
    assert operation.ok and operation.operation_name == "book_shipment"
    assert operation.result is not None
    assert operation.result["content"][0]["text"] == "booked shipment to 1 Main Street, Pune"
    agent = result.agent
    assert agent is not None and agent.harness == "codex" and agent.model == FAKE_MODEL_NAME
    assert agent.final_message == "Done: booked shipment to 1 Main Street, Pune"
    assert agent.turn_status == "completed"
    assert agent.token_usage is not None and agent.token_usage["total_tokens"] > 0
    # The stored round keeps the harness session and turn metadata.
    record = kit.store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.RESOLVED
    assert record.harness_session_id == agent.session_id
    assert record.turn_metadata is not None
    assert record.turn_metadata["turn_id"] == agent.turn_id
    assert record.harness_resume_token is None
    assert_nothing_left(codex_bin)


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_answers_reach_the_server(
    kit: MCPTestKit, codex_bin: str, action: str
) -> None:
    handle = submit(kit, example_server())
    answer(handle, ElicitationResponse(action=action))  # type: ignore[arg-type]
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    assert result.agent is not None
    assert result.agent.final_message == f"Done: shipment not booked: {action}"
    assert_nothing_left(codex_bin)


def test_fail_mode_answers_from_the_plan(kit: MCPTestKit) -> None:
    plan = {"rules": [{"request_key": "shipping_address", "action": "accept", "content": ADDRESS}]}
    handle = submit(kit, example_server(), human_input="fail", elicitation_plan=plan)
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert result.agent is not None
    assert result.agent.final_message == "Done: booked shipment to 1 Main Street, Pune"


def test_fail_mode_without_a_rule_fails_the_execution(kit: MCPTestKit, codex_bin: str) -> None:
    handle = submit(kit, example_server(), human_input="fail")
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == "elicitation_not_answered"
    assert_nothing_left(codex_bin)


# -- tool selection and native prompts --------------------------------------------------------


def mcp_tools(request: dict[str, Any]) -> list[str]:
    return [name for name in offered_tools(request) if name.startswith("mcp__")]


def test_the_agent_is_offered_exactly_the_selection(kit: MCPTestKit, model: FakeModel) -> None:
    handle = submit(kit, mcp_server("shipping"), tools=["shipping:quote"])
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert mcp_tools(model.requests[0]) == ["mcp__shipping/quote"]
    [operation] = result.operations
    assert (operation.operation_name, operation.ok) == ("quote", True)


def test_a_call_outside_the_selection_does_not_fail_the_task(
    kit: MCPTestKit, model: FakeModel, codex_bin: str
) -> None:
    """A model that names an unselected tool anyway gets Codex's "no such tool"; the
    task is then done with the selected tool, and the execution succeeds."""
    model.queue(CallTool("shipping", "book_shipment"), CallTool("shipping", "quote"))
    handle = submit(kit, mcp_server("shipping"), tools=["shipping:quote"])
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert [op.operation_name for op in result.operations] == ["quote"]
    # The unselected tool never ran: it would have asked for an address.
    assert kit.store.managed_input_store.list_rounds(execution_id=handle.execution_id) == []
    assert_nothing_left(codex_bin)


def test_without_a_selection_every_tool_is_offered(kit: MCPTestKit, model: FakeModel) -> None:
    model.queue(CallTool("shipping", "quote"))
    handle = submit(kit, mcp_server("shipping"), tools=[], permission_policy={"default": "allow"})
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert sorted(mcp_tools(model.requests[0])) == [
        "mcp__shipping/book_confirmed_shipment",
        "mcp__shipping/book_shipment",
        "mcp__shipping/keep_asking",
        "mcp__shipping/quote",
    ]


def test_a_permission_policy_denial_says_so(kit: MCPTestKit, model: FakeModel) -> None:
    model.queue(CallTool("shipping", "quote"))
    handle = submit(kit, mcp_server("shipping"), tools=[])
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == "permission_denied"
    assert result.failure_message is not None
    assert "permission policy" in result.failure_message
    assert "tool selection" not in result.failure_message
    [operation] = result.operations
    assert (operation.operation_name, operation.failure_code) == ("quote", "permission_denied")
    assert result.agent is not None
    assert [(p.kind, p.decision) for p in result.agent.native_prompts] == [
        ("mcp_tool_call", "deny")
    ]


@pytest.mark.parametrize("policy", ["allow", "deny"])
def test_permission_policy_answers_native_prompts(
    kit: MCPTestKit, model: FakeModel, policy: str
) -> None:
    model.queue(RunCommand("echo m3-ran-the-command"))
    handle = submit(kit, example_server(), permission_policy={"default": policy})
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    agent = result.agent
    assert agent is not None
    [prompt] = agent.native_prompts
    assert prompt.kind == "command_execution"
    assert prompt.decision == policy
    assert ("m3-ran-the-command" in (agent.final_message or "")) is (policy == "allow")


# -- lifecycle ------------------------------------------------------------------------------


def test_cancel_while_pending_stops_codex(kit: MCPTestKit, codex_bin: str) -> None:
    handle = submit(kit, example_server())
    pending = wait_pending(handle, timeout=120)
    assert codex_processes(codex_bin) != []
    handle.cancel()
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.CANCELLED
    [operation] = result.operations  # the call in flight, cut short
    assert (operation.operation_name, operation.failure_code) == ("book_shipment", "cancelled")
    record = kit.store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.FAILED and record.failure_code == "cancelled"
    assert_nothing_left(codex_bin)


def test_round_deadline_ends_the_turn(kit: MCPTestKit, codex_bin: str) -> None:
    handle = submit(kit, example_server(), round_timeout_seconds=1.0)
    pending = wait_pending(handle, timeout=120)
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == "operation_timeout"
    record = kit.store.managed_input_store.get_round(pending.round_id)
    assert record.status is ManagedInputStatus.FAILED
    assert record.failure_code == "operation_timeout"
    assert_nothing_left(codex_bin)


@pytest.mark.parametrize("variant", ["legacy", "mrtr"])
def test_a_pydantic_titled_form_becomes_a_managed_round(
    kit: MCPTestKit, model: FakeModel, variant: str
) -> None:
    """tests/mcp_servers/shipping.py asks with the SDK's usual `ctx.elicit(message,
    ShippingAddress)` (legacy) or `Resolve(...)` (2026-07-28): a schema with a top-level
    `title`, which Codex 0.171 would cancel itself. The caller sees the server's request."""
    model.queue(CallTool("shipping", "book_shipment"))
    binding = mcp_server("shipping", variant).model_copy(
        update={"protocol": "legacy" if variant == "legacy" else "2026-07-28"}
    )
    handle = submit(kit, binding)
    pending = answer(handle, ElicitationResponse(action="accept", content=ADDRESS))
    request = pending.requests["shipping_address"]
    assert request.mode == "form"
    assert request.requested_schema["required"] == ["street", "city"]
    if variant == "legacy":  # the SDK drops the title from 2026-07-28 requests
        assert request.requested_schema["title"] == "ShippingAddress"
    record = kit.store.managed_input_store.get_round(pending.round_id)
    assert record.harness_resume_token is None  # an agent's round is never handed over
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert result.agent is not None
    assert result.agent.final_message == "Done: booked shipment to 1 Main Street, Pune"


def test_url_elicitation_becomes_a_round(kit: MCPTestKit, codex_bin: str) -> None:
    handle = submit(kit, mcp_server("payment"), tools=["payment:authorize_payment"])
    pending = wait_pending(handle, timeout=120)
    [(key, request)] = pending.requests.items()
    assert key == "payment-authorization"
    assert request.mode == "url"
    assert request.url == "https://pay.example.test/authorize"
    assert pending.operation_name == "authorize_payment"
    handle.respond_elicitation(
        pending.round_id,
        {key: ElicitationResponse(action="accept")},
        idempotency_key=f"consent-{pending.round_id}",
    )
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert result.agent is not None
    assert result.agent.final_message == "Done: payment authorized: 10.0"
    assert_nothing_left(codex_bin)


def test_two_tool_calls_are_two_operations(kit: MCPTestKit, model: FakeModel) -> None:
    model.queue(CallTool("shipping", "book_shipment"), CallTool("shipping", "book_shipment"))
    handle = submit(kit, example_server())
    first = answer(handle, ElicitationResponse(action="accept", content=ADDRESS))
    second = eventually(
        lambda: next(
            (p for p in [handle.pending_elicitation()] if p and p.round_id != first.round_id),
            None,
        ),
        timeout=120,
    )
    handle.respond_elicitation(
        second.round_id,
        {"shipping_address": ElicitationResponse(action="decline")},
        idempotency_key=f"second-{second.round_id}",
    )
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert [op.logical_operation_id for op in result.operations] == ["op-0", "op-1"]
    assert (first.logical_operation_id, second.logical_operation_id) == ("op-0", "op-1")
    texts = [op.result["content"][0]["text"] for op in result.operations if op.result]
    assert texts == ["booked shipment to 1 Main Street, Pune", "shipment not booked: decline"]
    for round_id in (first.round_id, second.round_id):
        record = kit.store.managed_input_store.get_round(round_id)
        assert record.status is ManagedInputStatus.RESOLVED


def test_model_error_fails_the_turn(kit: MCPTestKit, model: FakeModel, codex_bin: str) -> None:
    # A 400 is not retried (a 5xx would be, five times).
    model.queue(Fail(400, "the fake model refuses"))
    handle = submit(kit, example_server())
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == "agent_turn_failed"
    assert result.agent is not None and result.agent.turn_status == "failed"
    assert_nothing_left(codex_bin)


@pytest.mark.parametrize("tools", [["remote:tool", "remote:other"], []])
def test_generated_config_passes_strict_config(
    tmp_path: Path, codex_bin: str, tools: list[str]
) -> None:
    """The MCP server table Codex gets (the relay's pipe, `enabled_tools` for a
    selection) is one that `--strict-config` accepts (it rejects unknown keys)."""
    task = HarnessTask(
        execution_id="exe_config",
        prompt="p",
        server=HttpServer(name="remote", url="http://127.0.0.1:9/mcp", headers={"X-Key": "v"}),
        tools=tools,
    )
    settings = CodexSettings(base_url="http://127.0.0.1:9/v1", env_key=KEY_VAR)
    relay = (sys.executable, ["-I", "-S", "relay_pipe.py", str(tmp_path / "relay.sock")])
    (tmp_path / "config.toml").write_text(codex_config(task, settings, FAKE_MODEL_NAME, relay))
    initialize = {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "t"}}}
    run = subprocess.run(
        [codex_bin, "app-server", "--strict-config"],
        input=json.dumps(initialize) + "\n",
        env={"CODEX_HOME": str(tmp_path), "PATH": os.environ["PATH"], KEY_VAR: "k"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "unknown configuration field" not in run.stderr


def test_without_a_selection_the_policy_answers_tool_calls(kit: MCPTestKit) -> None:
    handle = submit(kit, example_server(), tools=[], permission_policy={"default": "allow"})
    answer(handle, ElicitationResponse(action="accept", content=ADDRESS))
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    assert result.agent is not None
    [prompt] = result.agent.native_prompts
    assert (prompt.kind, prompt.decision) == ("mcp_tool_call", "allow")
    assert prompt.detail == "shipping:book_shipment"
