"""The MCP client under test for `@modelcontextprotocol/conformance client`.

The conformance runner starts `python client.py <server-url>` with
MCP_CONFORMANCE_SCENARIO set (and MCP_CONFORMANCE_PROTOCOL_VERSION when the run
names a spec version). This client is M3 itself: it submits an execution whose
scripted harness (a real MCP client) calls the scenario's tools on the
scenario's server, and exits 0 only if the execution succeeded.

M3_CONFORMANCE_HUMAN_INPUT chooses how the server's elicitations are answered:

- "managed" (default): the execution runs with human_input="managed" on a real
  SQLite store. Every elicitation becomes a durable pending round; an answerer
  in this process (standing in for the person at a form) reads each round from
  the kit, answers what the scenario expects with respond_elicitation, and the
  worker delivers the answer to the server.
- "fail": the execution runs with human_input="fail" and an elicitation plan
  that gives the same answers without a round.

The last line of stdout is a JSON report (human_input, every round answered,
outcome, operations), which the runner saves as stdout.txt for the test to read.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from m3grpc import (
    ElicitationResponse,
    ExecutionHandle,
    FormElicitationRequest,
    HttpServer,
    MCPTestKit,
    PendingElicitationRound,
)
from m3grpc.plan import schema_defaults
from m3grpc.servers import McpProtocol
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ElicitationRequest, ExecutionOutcome, ExecutionStatus

Answer = Callable[[ElicitationRequest], ElicitationResponse]
RESULT_TIMEOUT = 90.0


@dataclass(frozen=True)
class Scenario:
    tools: tuple[str, ...]  # called in this order, arguments from each tool's input schema
    answer: Answer  # what a person at the form answers each request with
    # The same answers as an elicitation plan (human_input="fail"); None: no plan.
    plan: Mapping[str, Any] | None
    # Arguments for tools whose input schema has no defaults to take them from.
    arguments: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def no_input(request: ElicitationRequest) -> ElicitationResponse:
    raise AssertionError(f"the scenario asked for no input, got {request}")


def accept_defaults(request: ElicitationRequest) -> ElicitationResponse:
    """SEP-1034: the form is pre-filled with the schema's defaults and accepted as is."""
    assert isinstance(request, FormElicitationRequest), request
    return ElicitationResponse(action="accept", content=schema_defaults(request))


def confirm(request: ElicitationRequest) -> ElicitationResponse:
    """SEP-2322 mock server: a yes/no confirmation (`confirmed: boolean`)."""
    assert isinstance(request, FormElicitationRequest), request
    assert "confirmed" in request.requested_schema.get("properties", {}), request
    return ElicitationResponse(action="accept", content={"confirmed": True})


SCENARIOS = {
    # A plain tool call (the server records the arguments it got).
    "tools_call": Scenario(
        tools=("add_numbers",),
        answer=no_input,
        plan=None,
        arguments={"add_numbers": {"a": 2, "b": 3}},
    ),
    "elicitation-sep1034-client-defaults": Scenario(
        tools=("test_client_elicitation_defaults",),
        answer=accept_defaults,
        plan={"rules": [{"action": "accept", "use_schema_defaults": True}]},
    ),
    # 2026-07-28 multi round-trip (inputRequests + requestState): two tools answer
    # input_required (one with requestState, one without); between them a plain
    # tool must carry neither; the last returns a result without resultType.
    "sep-2322-client-request-state": Scenario(
        tools=(
            "test_mrtr_echo_state",
            "test_mrtr_unrelated",
            "test_mrtr_no_state",
            "test_mrtr_no_result_type",
        ),
        answer=confirm,
        plan={"rules": [{"action": "accept", "content": {"confirmed": True}}]},
    ),
}


def binding_protocol() -> McpProtocol:
    """The runner's MCP_CONFORMANCE_PROTOCOL_VERSION as a binding protocol."""
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION")
    if not version:
        return "auto"
    return "2026-07-28" if version == "2026-07-28" else "legacy"


def answer_rounds(handle: ExecutionHandle, answer: Answer) -> list[dict[str, Any]]:
    """Answer every pending round until the execution finishes; the rounds answered."""
    answered: list[dict[str, Any]] = []
    seen: set[str] = set()
    deadline = time.monotonic() + RESULT_TIMEOUT
    while time.monotonic() < deadline:
        pending = handle.pending_elicitation()
        if pending is not None and pending.round_id not in seen:
            seen.add(pending.round_id)
            answered.append(respond(handle, pending, answer))
            continue
        if handle.snapshot().lifecycle is ExecutionStatus.FINISHED:
            return answered
        time.sleep(0.1)
    raise TimeoutError(f"execution {handle.execution_id} did not finish")


def respond(
    handle: ExecutionHandle, pending: PendingElicitationRound, answer: Answer
) -> dict[str, Any]:
    responses = {key: answer(request) for key, request in pending.requests.items()}
    outcome = handle.respond_elicitation(
        pending.round_id, responses, idempotency_key=f"conformance-{pending.round_id}"
    )
    return {
        "round_id": pending.round_id,
        "operation_name": pending.operation_name,
        "request_state": pending.request_state,
        "requests": {key: r.model_dump(mode="json") for key, r in pending.requests.items()},
        "responses": {key: r.model_dump(mode="json") for key, r in responses.items()},
        "status": str(outcome.status),
        "replayed": outcome.replayed,
    }


def run(scenario_name: str, url: str, human_input: str, store_path: Path) -> dict[str, Any]:
    scenario = SCENARIOS[scenario_name]
    server = HttpServer(name="conformance", url=url, protocol=binding_protocol())
    tools = [f"conformance:{tool}" for tool in scenario.tools]
    store = SQLiteExecutionStore(store_path)
    try:
        with MCPTestKit(store=store, env={}, poll_interval=0.2) as kit:
            agent = kit.agents([{"harness": "scripted", "models": []}])[0]
            prompt = f"Run conformance scenario {scenario_name}"
            rounds: list[dict[str, Any]] = []
            script = None
            if scenario.arguments:
                script = [
                    {"kind": "tool", "name": tool, "arguments": scenario.arguments.get(tool, {})}
                    for tool in scenario.tools
                ]
            if human_input == "managed":
                handle = agent.submit(
                    prompt, server=server, tools=tools, script=script, human_input="managed"
                )
                rounds = answer_rounds(handle, scenario.answer)
            else:
                handle = agent.submit(
                    prompt,
                    server=server,
                    tools=tools,
                    script=script,
                    elicitation_plan=scenario.plan,
                )
            state = handle.snapshot()
            result = handle.result(timeout=RESULT_TIMEOUT)
    finally:
        store.close()
    return {
        "scenario": scenario_name,
        "human_input": state.human_input,
        "rounds": rounds,
        "outcome": str(result.outcome),
        "failure_code": result.failure_code,
        "failure_message": result.failure_message,
        "operations": [op.model_dump(mode="json") for op in result.operations],
    }


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    human_input = os.environ.get("M3_CONFORMANCE_HUMAN_INPUT", "managed")
    if scenario not in SCENARIOS or human_input not in ("managed", "fail"):
        print(f"unsupported scenario {scenario!r} / human input {human_input!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="m3-conformance-") as directory:
        report = run(scenario, url, human_input, Path(directory) / "executions.sqlite")
    print(json.dumps(report))
    return 0 if report["outcome"] == str(ExecutionOutcome.SUCCEEDED) else 1


if __name__ == "__main__":
    raise SystemExit(main())
