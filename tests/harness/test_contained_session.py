"""An execution's own legacy Streamable HTTP session on `SessionDispatcher`
(m3grpc/harness/contained_session.py), against a real legacy MCP server over HTTP
(tests/harness/legacy_session_server.py, which records every HTTP request it gets):
every protocol step is still taken, what the server sends on the GET stream and on a
call's stream is served (also when the server attaches the GET stream late, or refuses
it), a paused call holds few tasks, and a cancelled caller cancels its request on the
server."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as t
import pytest
from mcp.client.session import ClientRequestContext, IncomingMessage

from m3grpc.harness import (
    HarnessTask,
    InputRound,
    OperationStep,
    ScriptedHarness,
    contained_session,
)
from m3grpc.harness.contained_session import SessionDispatcher
from m3grpc.harness.http_clients import HttpClients
from m3grpc.harness.mcp_tasks import TaskClient
from m3grpc.servers import HttpServer
from m3grpc.types import ElicitationResponse
from tests.support.mcp_processes import free_port, serve_http

SERVER = Path(__file__).with_name("legacy_session_server.py")
LEGACY = "2025-11-25"
# Bound of the waits for what the server notes (not a timing check).
WAIT_LIMIT_SECONDS = 60
# Bound of each test's flow, so that a lost message fails it instead of hanging the run
# (not a timing check: a session's few requests take well under a second).
TEST_LIMIT_SECONDS = 30


@contextmanager
def legacy_server(get: str = "serve") -> Iterator[str]:
    port = free_port()
    command = [sys.executable, str(SERVER), "--port", str(port), "--get", get]
    with serve_http(command, port) as url:
        yield url


@pytest.fixture
def url() -> Iterator[str]:
    with legacy_server() as url:
        yield url


async def journal(url: str) -> dict[str, Any]:
    async with httpx2.AsyncClient() as http:
        response = await http.get(url.removesuffix("/mcp") + "/journal")
        data: dict[str, Any] = response.json()
        return data


async def noted(url: str, note: str) -> None:
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        while note not in (await journal(url))["notes"]:
            await anyio.sleep(0.02)


async def test_a_paused_legacy_call_keeps_every_protocol_step_on_few_tasks(url: str) -> None:
    server = HttpServer(name="legacy", url=url, protocol="legacy")
    task = HarnessTask(
        execution_id="exec-1",
        prompt="Ask where to, then book.",
        server=server,
        tools=["legacy:survey"],
        script=[OperationStep("tool", "survey", {})],
    )
    idle = len(asyncio.all_tasks())
    paused: list[int] = []

    async def answer(round: InputRound) -> Mapping[str, ElicitationResponse]:
        paused.append(len(asyncio.all_tasks()) - idle)
        content = {"street": "1 Main Street", "city": "Pune"}
        return dict.fromkeys(round.requests, ElicitationResponse(action="accept", content=content))

    with anyio.fail_after(TEST_LIMIT_SECONDS):
        [result] = await ScriptedHarness().run(task, answer)

    # The roots request came on the GET stream and was answered; the address on the call's.
    assert result.ok, result
    assert result.result is not None
    assert result.result["content"][0]["text"] == "roots 0; 1 Main Street, Pune"
    # While paused, besides the execution's own: the session's run (reading the GET
    # stream) and the elicitation's handler (the SDK's stack held three more).
    assert paused == [2]
    # (Not the test's own GET that waited for the server to serve.)
    records = [r for r in (await journal(url))["records"] if r["session"] or r.get("rpc")]
    [initialize] = [r for r in records if r.get("rpc") == "initialize"]
    assert initialize["session"] is None
    rest = [r for r in records if r is not initialize]
    session = {r["session"] for r in rest}
    assert len(session) == 1 and None not in session
    assert {r["version"] for r in rest} == {LEGACY}
    steps = sorted((r["http"], r.get("rpc", "").split(" ")[0]) for r in rest)
    assert steps == sorted(
        [
            ("POST", "notifications/initialized"),
            ("GET", ""),
            ("POST", "tools/list"),
            ("POST", "tools/call"),
            ("POST", "answer"),  # roots/list
            ("POST", "answer"),  # elicitation/create
            ("DELETE", ""),
        ]
    )


class Seen:
    """What the server sent to a session: its notifications' methods, and roots asked."""

    def __init__(self) -> None:
        self.notifications: list[str] = []
        self.roots_asked = 0

    async def on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, t.ServerNotification):
            self.notifications.append(message.method)

    async def on_roots(self, context: ClientRequestContext) -> t.ListRootsResult:
        self.roots_asked += 1
        return t.ListRootsResult(roots=[t.Root(uri="file:///work", name="work")])

    async def on_elicit(
        self, context: ClientRequestContext, params: t.ElicitRequestParams
    ) -> t.ElicitResult:
        return t.ElicitResult(action="accept", content={"street": "2 High Street", "city": "Goa"})


@asynccontextmanager
async def session(url: str, seen: Seen) -> AsyncIterator[TaskClient]:
    async with HttpClients().client({}) as http:
        client = TaskClient(
            url,
            mode="legacy",
            elicitation_callback=seen.on_elicit,
            list_roots_callback=seen.on_roots,
            message_handler=seen.on_message,
            dispatcher=SessionDispatcher(url, http),
        )
        async with client as entered:
            assert isinstance(entered, TaskClient)
            yield entered


async def test_what_the_server_sends_on_either_stream_reaches_the_session(url: str) -> None:
    seen = Seen()
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    with anyio.fail_after(TEST_LIMIT_SECONDS):
        async with session(url, seen) as client:
            result = await client.session.call_tool("survey", {}, progress_callback=on_progress)

    assert result.content[0] == t.TextContent(type="text", text="roots 1; 2 High Street, Goa")
    assert seen.roots_asked == 1
    assert "notifications/tools/list_changed" in seen.notifications  # on the GET stream
    assert progress == [(1.0, 2.0, "asking")]  # on the call's stream


async def test_a_cancelled_caller_cancels_its_request_on_the_server(url: str) -> None:
    seen = Seen()
    with anyio.fail_after(TEST_LIMIT_SECONDS):
        async with session(url, seen) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.session.call_tool, "block", {})
                await noted(url, "block started")
                tg.cancel_scope.cancel()
            # The session is still open: the server learnt it from notifications/cancelled.
            await noted(url, "block cancelled")
            records = (await journal(url))["records"]
            assert ("POST", "notifications/cancelled") in [
                (r["http"], r.get("rpc")) for r in records
            ]
            assert "DELETE" not in [r["http"] for r in records]
            # The session carries on.
            result = await client.session.call_tool("survey", {})
            assert result.content[0] == t.TextContent(
                type="text", text="roots 1; 2 High Street, Goa"
            )


async def test_a_request_of_the_server_at_once_waits_for_a_late_get_stream() -> None:
    # The server holds the session's GET for a while, and `survey` asks for roots on the
    # GET stream as soon as it is called: the SDK server would drop that request if the
    # call came in before the stream was attached, and the call would never end.
    seen = Seen()
    with legacy_server("late") as url, anyio.fail_after(TEST_LIMIT_SECONDS):
        async with session(url, seen) as client:
            result = await client.session.call_tool("survey", {})

    assert result.content[0] == t.TextContent(type="text", text="roots 1; 2 High Street, Goa")
    assert seen.roots_asked == 1


async def test_requests_go_on_at_once_when_the_server_refuses_the_get_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen = Seen()
    with legacy_server("refuse") as url:
        with caplog.at_level(logging.WARNING, logger="m3grpc.harness.contained_session"):
            with anyio.fail_after(TEST_LIMIT_SECONDS):
                async with session(url, seen) as client:
                    result = await client.session.call_tool("address", {})
        records = (await journal(url))["records"]

    assert result.content[0] == t.TextContent(type="text", text="2 High Street, Goa")
    assert "GET" in [r["http"] for r in records if r["session"]]
    # The requests did not wait out the bound on the GET stream (it warns when it does).
    assert not [r for r in caplog.records if r.name == "m3grpc.harness.contained_session"]


async def test_requests_go_on_after_a_bound_when_the_get_stream_never_comes(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server never answers the session's GET: the requests wait for it once, for
    # the bound (shortened here), warn, and go on.
    monkeypatch.setattr(contained_session, "_GET_STREAM_WAIT_SECONDS", 0.2)
    seen = Seen()
    with (
        legacy_server("hold") as url,
        caplog.at_level(logging.WARNING, logger="m3grpc.harness.contained_session"),
        anyio.fail_after(TEST_LIMIT_SECONDS),
    ):
        async with session(url, seen) as client:
            first = await client.session.call_tool("address", {})
            second = await client.session.call_tool("address", {})

    assert first.content[0] == second.content[0]
    assert first.content[0] == t.TextContent(type="text", text="2 High Street, Goa")
    warnings = [r for r in caplog.records if r.name == "m3grpc.harness.contained_session"]
    assert [r.getMessage() for r in warnings] == [
        "MCP GET stream not answered in 0.2s: requests go on without it"
    ]
