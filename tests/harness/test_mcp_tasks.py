"""MCP tasks (2025-11-25) in the scripted harness, against server-everything.

- `simulate-research-query` (`execution.taskSupport: required`) runs as a task
  without being asked: created, polled with `tasks/get`, its result fetched
  with `tasks/result`; an ambiguous query's clarification is an elicitation
  for the task (related-task `_meta`) and becomes a round recording the task.
- `trigger-elicitation-request-async` is only listed because M3 declares client
  tasks: its task-augmented elicitation is run as an M3 client task whose round
  records the task; the server polls it and gets the round's answer.
- A task M3 abandons (the run cancelled) is cancelled with `tasks/cancel`
  (tests/mcp_servers/task_server.mjs logs it).

Over stdio and Streamable HTTP alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from m3grpc.errors import OperationTimeout
from m3grpc.harness import HarnessTask, InputRound, OperationStep, ScriptedHarness
from m3grpc.harness.mcp_tasks import RELATED_TASK_META
from m3grpc.servers import HttpServer, ServerBinding, StdioServer
from m3grpc.types import ElicitationResponse, OperationResult
from tests.support.everything import everything_http, everything_stdio
from tests.support.mcp_processes import MCP_SERVERS, free_port, serve_http
from tests.support.node import node_tools

pytestmark = pytest.mark.node


@pytest.fixture(params=["stdio", "http"])
def everything(request: pytest.FixtureRequest) -> Iterator[ServerBinding]:
    if request.param == "stdio":
        yield everything_stdio()
    else:
        with everything_http() as url:
            yield HttpServer(name="everything", url=url)


def task_for(server: ServerBinding, *steps: OperationStep) -> HarnessTask:
    return HarnessTask(
        execution_id="exec-tasks",
        prompt="",
        server=server,
        tools=[f"{server.name}:{step.name}" for step in steps],
        script=list(steps),
    )


class Recorder:
    def __init__(self, answer: Mapping[str, object]) -> None:
        self.answer = answer
        self.rounds: list[InputRound] = []

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        self.rounds.append(round)
        return {
            key: ElicitationResponse(action="accept", content=dict(self.answer))
            for key in round.requests
        }


def text(result: OperationResult) -> str:
    assert result.result is not None
    return " ".join(block["text"] for block in result.result["content"])


async def test_task_required_tool_runs_as_a_task(everything: ServerBinding) -> None:
    step = OperationStep("tool", "simulate-research-query", {"topic": "tides"})
    resolver = Recorder({})

    [result] = await ScriptedHarness().run(task_for(everything, step), resolver)

    assert result.ok, result.failure_message
    assert "# Research Report: tides" in text(result)
    assert resolver.rounds == []
    assert result.result is not None
    task = result.result["_meta"]["m3/task"]
    assert task["status"] == "completed" and task["taskId"]


async def test_task_elicitation_is_a_round_recording_the_task(everything: ServerBinding) -> None:
    step = OperationStep(
        "tool",
        "simulate-research-query",
        {"topic": "python", "ambiguous": True},
        task=True,
        task_ttl_seconds=120,
    )
    resolver = Recorder({"interpretation": "snake"})

    [result] = await ScriptedHarness().run(task_for(everything, step), resolver)

    assert result.ok, result.failure_message
    assert "Clarification**: snake" in text(result)
    [round] = resolver.rounds
    assert result.result is not None
    task_id = result.result["_meta"]["m3/task"]["taskId"]
    assert round.turn_metadata == {"harness": "scripted", "mcp_task_id": task_id}
    [request] = round.requests.values()
    assert request.meta is not None
    assert request.meta[RELATED_TASK_META] == {"taskId": task_id}


async def test_task_augmented_elicitation_runs_as_a_client_task(everything: ServerBinding) -> None:
    step = OperationStep("tool", "trigger-elicitation-request-async")
    resolver = Recorder({"name": "Ada", "favoriteColor": "Blue"})

    [result] = await ScriptedHarness().run(task_for(everything, step), resolver)

    assert result.ok, result.failure_message
    assert "[COMPLETED] User provided the requested information!" in text(result)
    assert "- Name: Ada" in text(result)
    [round] = resolver.rounds
    assert round.turn_metadata is not None
    task_id = round.turn_metadata["mcp_task_id"]
    assert task_id.startswith("m3-task-")
    [request] = round.requests.values()
    assert request.meta is not None and request.meta[RELATED_TASK_META] == {"taskId": task_id}
    assert request.task == {"ttl": 600000}
    assert task_id in text(result)  # the server polled that task


async def test_task_flag_on_a_tool_without_task_support_fails(everything: ServerBinding) -> None:
    step = OperationStep("tool", "echo", {"message": "hi"}, task=True)

    [result] = await ScriptedHarness().run(task_for(everything, step), Recorder({}))

    assert result.failure_code == "task_not_supported"
    assert "execution.taskSupport is forbidden" in (result.failure_message or "")


async def test_a_failed_round_of_a_task_fails_the_operation(everything: ServerBinding) -> None:
    ambiguous = OperationStep(
        "tool", "simulate-research-query", {"topic": "python", "ambiguous": True}
    )

    async def times_out(round: InputRound) -> Mapping[str, ElicitationResponse]:
        raise OperationTimeout("the round's deadline passed")

    [result] = await ScriptedHarness().run(task_for(everything, ambiguous), times_out)

    assert result.failure_code == "operation_timeout"


@pytest.fixture(params=["stdio", "http"])
def task_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ServerBinding, Path]]:
    log = tmp_path / "tasks.log"
    node, script = node_tools()["M3_SYSTEM_NODE"], str(MCP_SERVERS / "task_server.mjs")
    env = {"M3_TASK_LOG": str(log)}
    if request.param == "stdio":
        yield StdioServer(name="tasks", command=node, args=(script,), env=env), log
    else:
        port = free_port()
        with serve_http([node, script, "--http", "--port", str(port)], port, env=env) as url:
            yield HttpServer(name="tasks", url=url), log


async def lines(log: Path, count: int) -> list[str]:
    for _ in range(1200):
        found = log.read_text().splitlines() if log.exists() else []
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {count} lines in {log}")


@pytest.mark.parametrize("tool", ["slow-task", "slow-created-task"])
async def test_a_cancelled_run_cancels_its_task(
    task_server: tuple[ServerBinding, Path], tool: str
) -> None:
    # slow-created-task: the run is cancelled while the server creates the task.
    server, log = task_server
    run = asyncio.ensure_future(
        ScriptedHarness().run(task_for(server, OperationStep("tool", tool)), Recorder({}))
    )
    [created] = await lines(log, 1)

    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run

    assert await lines(log, 2) == [created, created.replace("created", "cancelled")]
