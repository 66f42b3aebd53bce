"""MCP tasks (2025-11-25) through the gRPC service, with real Node.js servers
over stdio and Streamable HTTP.

- server-everything's task-only `simulate-research-query` runs to completion
  as a task; asked with `OperationStep.task` and an ambiguous topic, its
  clarification (an elicitation for the task) is a managed round naming the
  task, and Respond's answer reaches the task's result.
- server-everything's `trigger-elicitation-request-async` sends a
  task-augmented elicitation: a managed round naming M3's client task; the
  server polls that task and gets Respond's answer.
- Cancel during a task sends `tasks/cancel` (tests/mcp_servers/task_server.mjs
  logs every cancelled task).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2, json_format
from google.rpc import error_details_pb2

from m3grpc.specs import ScriptStep
from m3grpc.wire import spec_codec
from m3grpc.wire.gen.m3.v1 import elicitation_pb2, execution_pb2, execution_service_pb2
from tests.api.conftest import SERVERS, ServerProcess, Stubs, expect_failure, write_config
from tests.support.mcp_processes import free_port, serve_http
from tests.support.node import node_tools

pytestmark = pytest.mark.node

RELATED_TASK = "io.modelcontextprotocol/related-task"


@pytest.fixture(scope="module")
def task_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("task-log") / "tasks.log"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, task_log: Path) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("mcp-tasks")
    tools = node_tools()
    node, everything = tools["M3_SYSTEM_NODE"], tools["M3_EVERYTHING_JS"]
    task_server = str(SERVERS / "task_server.mjs")
    env = {"M3_TASK_LOG": str(task_log)}
    everything_port, tasks_port = free_port(), free_port()
    with (
        serve_http(
            [node, everything, "streamableHttp"],
            everything_port,
            env={"PORT": str(everything_port)},
        ) as everything_url,
        serve_http(
            [node, task_server, "--http", "--port", str(tasks_port)], tasks_port, env=env
        ) as tasks_url,
    ):
        config = write_config(tmp / "m3.toml", tmp / "m3.sqlite")
        bindings = {
            "everything_stdio": {"command": node, "args": [everything, "stdio"]},
            "everything_http": {"url": everything_url},
            "tasks_stdio": {"command": node, "args": [task_server], "env": env},
            "tasks_http": {"url": tasks_url},
        }
        with config.open("a") as out:
            for name, table in bindings.items():
                out.write(f"[servers.{name}]\n")
                out.writelines(f"{key} = {toml_value(value)}\n" for key, value in table.items())
        process = ServerProcess(config, tmp / "server.log").start()
        try:
            yield process
        finally:
            process.terminate()


def toml_value(value: object) -> str:
    if isinstance(value, dict):  # an inline table
        return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def submit(stubs: Stubs, binding: str, step: execution_pb2.OperationStep) -> str:
    spec = execution_pb2.AgentSpec(
        harness="scripted",
        server=binding,
        tools=[f"{binding}:{step.name}"],
        prompt="Run the task.",
        script=[step],
    )
    response = stubs.executions.Submit(
        execution_service_pb2.SubmitRequest(
            agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
        ),
        timeout=30,
    )
    return str(response.execution_id)


def tool_step(
    name: str, arguments: dict[str, object], **fields: object
) -> execution_pb2.OperationStep:
    step = execution_pb2.OperationStep(kind=execution_pb2.OPERATION_KIND_TOOL, name=name, **fields)
    step.arguments.update(arguments)
    return step


def text_of(result: execution_pb2.ExecutionResult) -> str:
    [operation] = result.operations
    document = json_format.MessageToDict(operation.result)
    return " ".join(block["text"] for block in document["content"])


def respond(
    stubs: Stubs, round: elicitation_pb2.PendingElicitationRound, content: dict[str, object]
) -> None:
    [key] = round.requests
    stubs.respond(round.round_id, f"answer-{round.round_id}", content, request_key=key)


def test_task_required_tool_completes(stubs: Stubs, transport: str) -> None:
    step = tool_step("simulate-research-query", {"topic": "tides"})

    result = stubs.result(submit(stubs, f"everything_{transport}", step))

    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
    assert "# Research Report: tides" in text_of(result)
    task = json_format.MessageToDict(result.operations[0].result)["_meta"]["m3/task"]
    assert task["status"] == "completed"


def test_task_elicitation_is_a_managed_round(stubs: Stubs, transport: str) -> None:
    step = tool_step(
        "simulate-research-query",
        {"topic": "python", "ambiguous": True},
        task=True,
        task_ttl=duration_pb2.Duration(seconds=120),
    )
    execution_id = submit(stubs, f"everything_{transport}", step)

    round = stubs.wait_pending(execution_id)
    [request] = round.requests.values()
    task_id = json_format.MessageToDict(request.meta)[RELATED_TASK]["taskId"]
    respond(stubs, round, {"interpretation": "comedy"})
    result = stubs.result(execution_id)

    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
    assert "Clarification**: comedy" in text_of(result)
    meta = json_format.MessageToDict(result.operations[0].result)["_meta"]
    assert meta["m3/task"]["taskId"] == task_id


def test_task_augmented_elicitation_is_a_managed_round(stubs: Stubs, transport: str) -> None:
    step = tool_step("trigger-elicitation-request-async", {})
    execution_id = submit(stubs, f"everything_{transport}", step)

    round = stubs.wait_pending(execution_id)
    [request] = round.requests.values()
    task_id = json_format.MessageToDict(request.meta)[RELATED_TASK]["taskId"]
    assert json_format.MessageToDict(request.task) == {"ttl": 600000.0}
    respond(stubs, round, {"name": "Ada", "favoriteColor": "Green", "agreeToTerms": True})
    result = stubs.result(execution_id)

    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
    text = text_of(result)
    assert "[COMPLETED] User provided the requested information!" in text
    assert "- Favorite Color: Green" in text
    assert f"Task created: {task_id}" in text  # the server polled M3's task


def wait_for_line(log: Path, prefix: str, seen: set[str]) -> str:
    for _ in range(1200):
        lines = log.read_text().splitlines() if log.exists() else []
        fresh = [line for line in lines if line.startswith(prefix) and line not in seen]
        if fresh:
            return fresh[0].removeprefix(prefix)
        time.sleep(0.05)
    raise AssertionError(f"no {prefix!r} line in {log}")


def test_cancel_during_a_task_sends_tasks_cancel(
    stubs: Stubs, transport: str, task_log: Path
) -> None:
    seen = set(task_log.read_text().splitlines()) if task_log.exists() else set()
    execution_id = submit(stubs, f"tasks_{transport}", tool_step("slow-task", {}))
    task_id = wait_for_line(task_log, "created ", seen)

    stubs.executions.Cancel(
        execution_service_pb2.CancelRequest(execution_id=execution_id), timeout=30
    )
    result = stubs.result(execution_id)

    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_CANCELLED, result
    assert wait_for_line(task_log, "cancelled ", seen) == task_id


def test_task_on_a_prompt_step_is_invalid(stubs: Stubs) -> None:
    step = execution_pb2.OperationStep(
        kind=execution_pb2.OPERATION_KIND_PROMPT, name="greeting", task=True
    )
    spec = execution_pb2.AgentSpec(harness="scripted", server="everything_stdio", script=[step])

    failure = expect_failure(
        stubs.executions.Submit, execution_service_pb2.SubmitRequest(agent=spec), timeout=30
    )

    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    violations = failure.detail(error_details_pb2.BadRequest).field_violations
    assert [v.field for v in violations] == ["agent.script[0].task"]


def test_task_ttl_round_trips_through_the_remote_client() -> None:
    step = ScriptStep(kind="tool", name="slow-task", task=True, task_ttl_seconds=90)

    message = spec_codec.step_message(step)

    assert message.task and message.task_ttl.seconds == 90
    with pytest.raises(ValueError, match="only a tool call can run as an MCP task"):
        ScriptStep(kind="resource", name="file:///x", task_ttl_seconds=5)


def test_a_task_ttl_beyond_ten_years_names_the_request_field(stubs: Stubs) -> None:
    step = tool_step(
        "slow-task", {}, task=True, task_ttl=duration_pb2.Duration(seconds=400_000_000)
    )
    spec = execution_pb2.AgentSpec(harness="scripted", server="tasks_stdio", script=[step])

    failure = expect_failure(
        stubs.executions.Submit, execution_service_pb2.SubmitRequest(agent=spec), timeout=30
    )

    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    violations = failure.detail(error_details_pb2.BadRequest).field_violations
    assert [v.field for v in violations] == ["agent.script[0].task_ttl"]
