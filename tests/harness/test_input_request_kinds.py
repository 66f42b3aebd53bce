"""Roots and sampling next to elicitations, in both protocol generations.

`roots/list` is answered from the binding's `roots` (empty by default), in a
2026-07-28 round's `inputRequests` and as a legacy request alike; sampling is
not answered (legacy: the JSON-RPC error "Sampling not supported"; 2026-07-28:
no response for that key in the retry), and the round's elicitations still
reach the resolver as the round.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from m3grpc.api.config import load_config
from m3grpc.harness import HarnessTask, InputRound, OperationStep, ScriptedHarness
from m3grpc.servers import HttpServer, ServerBinding, StdioServer
from m3grpc.types import ElicitationResponse, FormElicitationRequest, OperationResult
from tests.support.mcp_processes import http_mcp_server

SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"
ROOTS = [{"uri": "file:///srv/project", "name": "project"}, {"uri": "file:///srv/docs"}]
VARIANTS = ["legacy", "mrtr"]


def workspace(variant: str, *, roots: list[dict[str, str]] | None = None) -> StdioServer:
    return StdioServer.model_validate(
        {
            "name": "workspace",
            "command": sys.executable,
            "args": [str(SERVERS / "workspace.py"), "--variant", variant],
            "roots": roots or [],
        }
    )


def task_for(server: ServerBinding, *names: str) -> HarnessTask:
    return HarnessTask(
        execution_id="exec-kinds",
        prompt="",
        server=server,
        tools=[f"{server.name}:{name}" for name in names],
        script=[OperationStep("tool", name) for name in names],
    )


class Topics:
    """Answers every request of a round with a topic; records the rounds."""

    def __init__(self) -> None:
        self.rounds: list[InputRound] = []

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        self.rounds.append(round)
        return dict.fromkeys(
            round.requests, ElicitationResponse(action="accept", content={"topic": "security"})
        )


def text_of(result: OperationResult) -> str:
    assert result.ok and result.result is not None, result
    return str(result.result["content"][0]["text"])


@pytest.mark.parametrize("variant", VARIANTS)
async def test_roots_and_an_elicitation_in_one_round(variant: str) -> None:
    topics = Topics()

    [result] = await ScriptedHarness().run(
        task_for(workspace(variant, roots=ROOTS), "review_workspace"), topics
    )

    assert text_of(result) == "review security in file:///srv/project, file:///srv/docs"
    # Only the elicitation is the round; the roots were answered without one.
    [round] = topics.rounds
    [(key, request)] = round.requests.items()
    assert key == ("topic" if variant == "legacy" else "ask_topic")
    assert isinstance(request, FormElicitationRequest)
    assert round.round_index == 0


@pytest.mark.parametrize("variant", VARIANTS)
async def test_roots_alone_need_no_round_and_default_to_none(variant: str) -> None:
    topics = Topics()

    [result] = await ScriptedHarness().run(task_for(workspace(variant), "roots_only"), topics)

    assert text_of(result) == "roots: no roots"
    assert topics.rounds == []


async def test_sampling_is_not_answered_and_the_elicitation_still_asked() -> None:
    topics = Topics()

    legacy, mrtr = [
        await ScriptedHarness().run(task_for(workspace(variant), "draft_with_sampling"), topics)
        for variant in VARIANTS
    ]

    assert [text_of(r) for r in [*legacy, *mrtr]] == [
        "topic security; sampling: error -32600: Sampling not supported",
        "topic security; sampling: no response",
    ]
    assert [list(r.requests) for r in topics.rounds] == [["topic"], ["topic"]]


async def test_a_round_of_only_sampling_fails_unsupported_input_request() -> None:
    [result] = await ScriptedHarness().run(task_for(workspace("mrtr"), "sampling_only"), Topics())

    assert result.failure_code == "unsupported_input_request"
    assert "'sampling/createMessage' ('draft')" in (result.failure_message or "")


async def test_roots_over_http() -> None:
    topics = Topics()
    with http_mcp_server("workspace", "mrtr") as url:
        server = HttpServer.model_validate(
            {"name": "workspace", "url": url, "protocol": "2026-07-28", "roots": ROOTS[:1]}
        )
        [result] = await ScriptedHarness().run(task_for(server, "review_workspace"), topics)

    assert text_of(result) == "review security in file:///srv/project"
    assert [list(r.requests) for r in topics.rounds] == [["ask_topic"]]


def test_roots_must_be_file_uris() -> None:
    with pytest.raises(ValueError, match="file://"):
        workspace("mrtr", roots=[{"uri": "https://example.org"}])


def test_roots_in_the_service_config(tmp_path: Path) -> None:
    path = tmp_path / "m3.toml"
    path.write_text(
        """
[servers.workspace]
command = "python"
args = ["tests/mcp_servers/workspace.py"]
roots = [{ uri = "file:///srv/project", name = "project" }]
[servers.remote]
url = "http://127.0.0.1:8000/mcp"
roots = [{ uri = "file:///srv/docs" }]
"""
    )
    config = load_config(path)
    assert [(r.uri, r.name) for r in config.servers["workspace"].roots] == [
        ("file:///srv/project", "project")
    ]
    assert [(r.uri, r.name) for r in config.servers["remote"].roots] == [("file:///srv/docs", None)]
