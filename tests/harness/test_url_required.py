"""URL elicitation required (JSON-RPC -32042) as a round, against real servers.

The server answers a call with the error listing URL elicitations: the harness
hands them to the resolver as one round (keyed by elicitationId); on consent it
retries the call once, on decline/cancel the operation fails with a clear code.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import pytest

from m3grpc.harness import HarnessTask, InputRound, OperationStep, ScriptedHarness
from m3grpc.servers import HttpServer, ServerBinding, StdioServer
from m3grpc.types import ElicitationResponse, OperationResult, UrlElicitationRequest
from tests.support.everything import TRANSPORTS, Transport, everything_binding, everything_stdio
from tests.support.mcp_processes import http_mcp_server

SERVERS = Path(__file__).resolve().parents[1] / "mcp_servers"
URL_REQUIRED = StdioServer(
    name="vault", command=sys.executable, args=[str(SERVERS / "url_required.py")]
)


def task_for(server: ServerBinding, *steps: OperationStep, round_limit: int = 8) -> HarnessTask:
    return HarnessTask(
        execution_id="exec-url-required",
        prompt="",
        server=server,
        tools=[f"{server.name}:{step.name}" for step in steps],
        script=list(steps),
        round_limit=round_limit,
    )


class Answer:
    """Records each round and answers every request with `action`."""

    def __init__(self, action: Literal["accept", "decline", "cancel"]) -> None:
        self.action: Literal["accept", "decline", "cancel"] = action
        self.rounds: list[InputRound] = []

    async def __call__(self, round: InputRound) -> Mapping[str, ElicitationResponse]:
        self.rounds.append(round)
        return dict.fromkeys(round.requests, ElicitationResponse(action=self.action))


def text_of(result: OperationResult) -> str:
    assert result.result is not None, result
    return str(result.result["content"][0]["text"])


async def test_accept_retries_once_and_records_the_completion_notification() -> None:
    answer = Answer("accept")

    [result] = await ScriptedHarness().run(
        task_for(URL_REQUIRED, OperationStep("tool", "open_vault")), answer
    )

    assert result.ok and text_of(result) == "vault main opened"
    # The server sent notifications/elicitation/complete during the retry.
    assert result.result is not None
    assert result.result["_meta"]["m3/elicitation_complete"] == ["vault-login"]
    [round] = answer.rounds
    assert (round.round_index, round.protocol, round.request_state) == (0, "legacy", None)
    [(key, request)] = round.requests.items()
    assert key == "vault-login"
    assert isinstance(request, UrlElicitationRequest)
    assert (request.url, request.elicitation_id) == (
        "https://vault.example.test/login",
        "vault-login",
    )
    assert (request.operation_kind, request.operation_name) == ("tool", "open_vault")


async def test_every_listed_elicitation_is_one_request_of_the_round() -> None:
    answer = Answer("accept")

    [result] = await ScriptedHarness().run(
        task_for(URL_REQUIRED, OperationStep("tool", "sign_contract")), answer
    )

    assert result.ok and text_of(result) == "contract signed"
    assert "_meta" not in (result.result or {})  # no notification, nothing recorded
    assert [list(r.requests) for r in answer.rounds] == [["identity-check", "signature"]]


@pytest.mark.parametrize(
    ("action", "code"),
    [("decline", "url_elicitation_declined"), ("cancel", "url_elicitation_cancelled")],
)
async def test_decline_or_cancel_ends_the_operation_without_a_retry(
    action: Literal["decline", "cancel"], code: str
) -> None:
    answer = Answer(action)
    task = task_for(
        URL_REQUIRED, OperationStep("tool", "open_vault"), OperationStep("tool", "open_vault")
    )

    first, second = await ScriptedHarness().run(task, answer)

    assert first.failure_code == code and first.result is None
    assert "'vault-login'" in (first.failure_message or "")
    # The first call was never retried: the server still has the retry to come,
    # which the script's second step makes (no round, it just opens).
    assert second.ok and text_of(second) == "vault main opened"
    assert len(answer.rounds) == 1


async def test_an_error_after_every_retry_is_bounded_by_the_round_limit() -> None:
    answer = Answer("accept")

    [result] = await ScriptedHarness().run(
        task_for(URL_REQUIRED, OperationStep("tool", "always_required"), round_limit=2), answer
    )

    assert result.failure_code == "round_limit_exceeded"
    assert [r.round_index for r in answer.rounds] == [0, 1]


async def test_over_http() -> None:
    answer = Answer("accept")
    with http_mcp_server("url_required", "legacy") as url:
        server = HttpServer(name="vault", url=url, protocol="legacy")
        [result] = await ScriptedHarness().run(
            task_for(server, OperationStep("tool", "open_vault")), answer
        )

    assert result.ok and text_of(result) == "vault main opened"
    assert result.result is not None
    assert result.result["_meta"]["m3/elicitation_complete"] == ["vault-login"]
    assert [list(r.requests) for r in answer.rounds] == [["vault-login"]]


EVERYTHING_STEP = OperationStep(
    "tool",
    "trigger-url-elicitation",
    {"url": "https://example.org/start", "errorPath": True, "elicitationId": "start"},
)


@pytest.mark.node
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_server_everything_error_path(transport: Transport) -> None:
    """The error round, then (server-everything's retry takes its request path) a
    legacy URL elicitation for the URL the call named."""
    answer = Answer("accept")
    with everything_binding(transport) as server:
        [result] = await ScriptedHarness().run(task_for(server, EVERYTHING_STEP), answer)

    assert result.ok, result
    assert text_of(result).startswith("✅ User completed the URL elicitation flow.")
    error_round, request_round = answer.rounds
    [prerequisite] = error_round.requests.values()
    assert isinstance(prerequisite, UrlElicitationRequest)
    assert prerequisite.url == "https://modelcontextprotocol.io"
    assert list(error_round.requests) == [prerequisite.elicitation_id]
    assert list(request_round.requests) == ["start"]
    assert [r.round_index for r in answer.rounds] == [0, 1]


@pytest.mark.node
async def test_server_everything_error_path_declined() -> None:
    answer = Answer("decline")

    [result] = await ScriptedHarness().run(task_for(everything_stdio(), EVERYTHING_STEP), answer)

    assert result.failure_code == "url_elicitation_declined"
    assert "This request requires browser-based authorization." in (result.failure_message or "")
    assert len(answer.rounds) == 1
