"""Every form-schema construct of MCP elicitation, through the real Codex binary.

tests/mcp_servers/form_constructs.json lists the constructs (one tool each in
tests/mcp_servers/form_constructs.py), with what Codex 0.171 does when it is handed
one as the server sent it. Through M3's relay every one reaches the caller as the
server sent it, and the caller's answer reaches the server as given; with the relay's
shaping turned off, Codex's own behaviour shows, and what it refuses fails the
operation with a typed code instead of a silent success. docs/guides/harnesses/codex.md
shows the table (tests/docs checks it against the JSON file).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from m3grpc import ElicitationResponse, MCPTestKit, StdioServer
from m3grpc.devtools.fake_model import FAKE_MODEL_NAME, CallTool, FakeModel
from m3grpc.harness import codex as codex_module
from m3grpc.harness import relay as relay_module
from m3grpc.types import ExecutionOutcome, ExecutionResult, PendingElicitationRound
from tests.runtime.conftest import eventually
from tests.support.codex import assert_nothing_left

SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"
CONSTRUCTS: list[dict[str, Any]] = json.loads(
    (SERVERS / "form_constructs.json").read_text(encoding="utf-8")
)["constructs"]
CONSTRUCTS_BY_NAME = {c["name"]: c for c in CONSTRUCTS}


def forms_server() -> StdioServer:
    return StdioServer(
        name="forms",
        command=sys.executable,
        args=[str(SERVERS / "form_constructs.py")],
        protocol="legacy",
    )


def submit_all(kit: MCPTestKit, model: FakeModel) -> Any:
    """One execution whose agent calls every construct's tool in turn."""
    model.queue(*(CallTool("forms", f"ask_{c['name']}") for c in CONSTRUCTS))
    agent = kit.agents([{"harness": "codex", "models": [FAKE_MODEL_NAME]}])[0]
    return agent.submit(
        "Fill in every form.",
        server=forms_server(),
        tools=[f"forms:ask_{c['name']}" for c in CONSTRUCTS],
        human_input="managed",
    )


def pending_for(handle: Any, key: str) -> PendingElicitationRound:
    def probe() -> PendingElicitationRound | None:
        pending = handle.pending_elicitation()
        return pending if pending is not None and key in pending.requests else None

    return eventually(probe, timeout=120, what=f"the round of {key}")


def server_saw(result: ExecutionResult) -> dict[str, Mapping[str, Any]]:
    """What the server returned per construct: the answer it received."""
    seen: dict[str, Mapping[str, Any]] = {}
    for operation in result.operations:
        name = operation.operation_name.removeprefix("ask_")
        assert operation.result is not None, operation
        seen[name] = json.loads(operation.result["content"][0]["text"])
    return seen


def test_every_form_construct_reaches_the_caller_as_the_server_sent_it(
    codex_kit: MCPTestKit, model: FakeModel, codex_bin: str
) -> None:
    handle = submit_all(codex_kit, model)
    for construct in CONSTRUCTS:
        name = construct["name"]
        pending = pending_for(handle, name)
        request = pending.requests[name]
        assert request.mode == "form"
        assert request.requested_schema == construct["schema"], name
        assert request.message == f"construct {name}"
        handle.respond_elicitation(
            pending.round_id,
            {name: ElicitationResponse(action="accept", content=construct["content"])},
            idempotency_key=f"{name}-{pending.round_id}",
        )
    result = handle.result(timeout=120)
    assert result.outcome is ExecutionOutcome.SUCCEEDED, result
    expected = {c["name"]: {"action": "accept", "content": c["content"]} for c in CONSTRUCTS}
    assert server_saw(result) == expected
    assert_nothing_left(codex_bin)


def test_what_codex_does_with_each_construct_as_sent(
    codex_kit: MCPTestKit, model: FakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay hands Codex the server's schema unchanged (its shaping turned off):
    a construct Codex refuses is answered `cancel` by Codex itself, and the operation
    fails `agent_refused_elicitation` with the server's request in its result; Codex
    forwards the others, dropping the constructs marked 'rewritten'."""
    monkeypatch.setattr(codex_module, "codex_schema", relay_module.as_sent)
    forwarded: dict[str, Mapping[str, Any] | None] = {}
    answer = relay_module.AgentRelay.answer

    async def recording(self: Any, elicitation: Any, **kwargs: Any) -> Any:
        forwarded[elicitation.message.removeprefix("construct ")] = elicitation.requested_schema
        return await answer(self, elicitation, **kwargs)

    monkeypatch.setattr(relay_module.AgentRelay, "answer", recording)
    handle = submit_all(codex_kit, model)
    for construct in CONSTRUCTS:
        if construct["codex"] == "refused":
            continue
        name = construct["name"]
        pending = pending_for(handle, name)
        handle.respond_elicitation(
            pending.round_id,
            {name: ElicitationResponse(action="decline")},
            idempotency_key=f"{name}-{pending.round_id}",
        )
    result = handle.result(timeout=120)

    refused = [c["name"] for c in CONSTRUCTS if c["codex"] == "refused"]
    assert result.outcome is ExecutionOutcome.FAILED
    assert result.failure_code == "agent_refused_elicitation"
    assert sorted(set(CONSTRUCTS_BY_NAME) - set(forwarded)) == sorted(refused)
    for name, schema in forwarded.items():
        unchanged = CONSTRUCTS_BY_NAME[name]["codex"] == "unchanged"
        assert (schema == CONSTRUCTS_BY_NAME[name]["schema"]) is unchanged, (name, schema)
    by_name = {op.operation_name.removeprefix("ask_"): op for op in result.operations}
    for name in refused:
        operation = by_name[name]
        assert operation.failure_code == "agent_refused_elicitation"
        assert operation.failure_message is not None and "codex" in operation.failure_message
        assert operation.result is not None
        [request] = operation.result["_meta"]["m3/unrelayed_elicitation"]
        assert request["request_key"] == name
        assert request["requested_schema"] == CONSTRUCTS_BY_NAME[name]["schema"]
        # The server got Codex's own answer, as it would without M3.
        assert json.loads(operation.result["content"][0]["text"])["action"] == "cancel"
    for name in forwarded:
        assert by_name[name].ok, by_name[name]
