"""Executions of one 2026-07-28 Streamable HTTP binding share one MCP client session
(m3grpc/harness/shared_sessions.py): real MCP servers (tests/mcp_servers) over HTTP,
the real SDK. Each execution still gets its own rounds and answers, cancelling one
cancels only its own call, a server that goes away or restarts gives typed outcomes,
and closing leaves no task behind."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import pytest

from m3grpc import AsyncMCPTestKit, ElicitationResponse
from m3grpc.harness import (
    HarnessTask,
    InputResolver,
    InputRound,
    OperationStep,
    ScriptedHarness,
)
from m3grpc.servers import HttpServer
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome, OperationResult
from tests.support.mcp_processes import MCP_SERVERS, free_port, http_mcp_server, serve_http

MRTR: Final = "2026-07-28"


def binding(url: str, name: str = "shipping") -> HttpServer:
    return HttpServer(name=name, url=url, protocol=MRTR)


def task(server: HttpServer, execution_id: str, step: OperationStep) -> HarnessTask:
    return HarnessTask(
        execution_id=execution_id,
        prompt="Book the shipment.",
        server=server,
        tools=[f"{server.name}:{step.name}"],
        script=[step],
    )


def address(n: int) -> dict[str, str]:
    return {"street": f"{n} Main Street", "city": f"City {n}"}


def text_of(result: OperationResult) -> str:
    assert result.result is not None, result
    return str(result.result["content"][0]["text"])


def sessions_open(harness: ScriptedHarness) -> int:
    """How many shared sessions the harness has open in this event loop."""
    shared = harness._shared.get(asyncio.get_running_loop())
    return 0 if shared is None else len(shared._owners)


def other_tasks() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


@pytest.fixture
def crash_target() -> tuple[list[str], int]:
    """The command and port of tests/mcp_servers/crash_target.py (a fixed request-state
    key: its 2026-07-28 rounds survive a restart of the server)."""
    port = free_port()
    return [sys.executable, str(MCP_SERVERS / "crash_target.py"), "--port", str(port)], port


async def test_concurrent_executions_share_one_session_and_keep_their_own_rounds() -> None:
    harness = ScriptedHarness()
    with http_mcp_server("shipping", "mrtr") as url:
        server = binding(url)
        seen: dict[int, list[InputRound]] = {}
        all_asked = asyncio.Event()
        count = 6

        def resolver(n: int) -> InputResolver:
            async def answer(round: InputRound) -> Mapping[str, ElicitationResponse]:
                seen.setdefault(n, []).append(round)
                if sum(len(r) for r in seen.values()) >= count:
                    all_asked.set()
                # Every execution waits until all have asked: their rounds overlap.
                await asyncio.wait_for(all_asked.wait(), 60)
                response = ElicitationResponse(action="accept", content=address(n))
                return dict.fromkeys(round.requests, response)

            return answer

        runs = [
            harness.run(
                task(server, f"exec-{n}", OperationStep("tool", "book_shipment")), resolver(n)
            )
            for n in range(count)
        ]
        results = await asyncio.wait_for(asyncio.gather(*runs), 120)
        assert sessions_open(harness) == 1
        await harness.aclose()

    for n, [result] in enumerate(results):
        assert result.ok, result
        assert text_of(result) == f"booked shipment to {n} Main Street, City {n}"
        [round] = seen[n]
        assert round.protocol == "mrtr" and round.operation.operation_name == "book_shipment"
    assert other_tasks() == set()


async def test_cancelling_one_execution_cancels_only_its_own_call(
    tmp_path: Path, crash_target: tuple[list[str], int]
) -> None:
    command, port = crash_target
    harness = ScriptedHarness()
    with serve_http(command, port) as url:
        server = binding(url, "crash_target")
        markers = [tmp_path / f"delivered-{n}" for n in range(3)]

        async def answer(round: InputRound) -> Mapping[str, ElicitationResponse]:
            return {"shipping_address": ElicitationResponse(action="accept", content=address(1))}

        def run(n: int, hold: float) -> asyncio.Task[list[OperationResult]]:
            step = OperationStep(
                "tool", "book_resumable", {"marker": str(markers[n]), "hold": hold}
            )
            return asyncio.create_task(harness.run(task(server, f"exec-{n}", step), answer))

        # Execution 0's retry is held by the server for a minute; 1 and 2 for 5 s.
        runs = [run(0, 60.0), run(1, 5.0), run(2, 5.0)]
        # All three retries are in flight on the one session (each answer reached the server).
        while not all(marker.exists() for marker in markers):
            assert not any(r.done() for r in runs), [r.result() for r in runs if r.done()]
            await asyncio.sleep(0.02)
        runs[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(runs[0], 30)
        for other in runs[1:]:
            [result] = await asyncio.wait_for(other, 60)
            assert result.ok and text_of(result) == "booked shipment to 1 Main Street, City 1"
        # The session still serves new executions.
        markers.append(tmp_path / "delivered-3")
        [later] = await asyncio.wait_for(run(3, 0.0), 60)
        assert later.ok
        assert sessions_open(harness) == 1
        await harness.aclose()
    assert other_tasks() == set()


async def test_server_restart_mid_run_and_server_gone(
    tmp_path: Path, crash_target: tuple[list[str], int]
) -> None:
    command, port = crash_target
    harness = ScriptedHarness()
    server_cm = serve_http(command, port)
    url = server_cm.__enter__()
    try:
        server = binding(url, "crash_target")
        step = OperationStep("tool", "book_resumable", {"marker": str(tmp_path / "m"), "hold": 0})

        async def restart_then_answer(round: InputRound) -> Mapping[str, ElicitationResponse]:
            # The server restarts while the execution waits for its human: the retry
            # reaches the new process (a 2026-07-28 server keeps no session).
            nonlocal server_cm
            await asyncio.to_thread(server_cm.__exit__, None, None, None)
            server_cm = serve_http(command, port)
            await asyncio.to_thread(server_cm.__enter__)
            return {"shipping_address": ElicitationResponse(action="accept", content=address(2))}

        [restarted] = await asyncio.wait_for(
            harness.run(task(server, "e-1", step), restart_then_answer), 120
        )
        assert restarted.ok and text_of(restarted) == "booked shipment to 2 Main Street, City 2"

        async def stop_then_answer(round: InputRound) -> Mapping[str, ElicitationResponse]:
            await asyncio.to_thread(server_cm.__exit__, None, None, None)
            return {"shipping_address": ElicitationResponse(action="accept", content=address(3))}

        # The server is gone when the retry is sent: a typed outcome, not a crash.
        [gone] = await asyncio.wait_for(
            harness.run(task(server, "e-2", step), stop_then_answer), 60
        )
        assert not gone.ok and gone.failure_code == "connection_closed", gone
        assert "failed" in (gone.failure_message or "")

        # Nothing is listening: the next execution cannot connect (typed, at once).
        [unreachable] = await asyncio.wait_for(
            harness.run(task(server, "e-3", step), stop_then_answer), 60
        )
        assert not unreachable.ok
        assert unreachable.failure_code in ("server_unavailable", "connection_closed")

        # The server is back: later executions work again.
        server_cm = serve_http(command, port)
        await asyncio.to_thread(server_cm.__enter__)

        async def answer(round: InputRound) -> Mapping[str, ElicitationResponse]:
            return {"shipping_address": ElicitationResponse(action="accept", content=address(4))}

        [again] = await asyncio.wait_for(harness.run(task(server, "e-4", step), answer), 60)
        assert again.ok and text_of(again) == "booked shipment to 4 Main Street, City 4"
        await harness.aclose()
    finally:
        server_cm.__exit__(None, None, None)
    assert other_tasks() == set()


async def test_the_runtimes_close_leaves_no_task_behind(tmp_path: Path) -> None:
    store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
    try:
        with http_mcp_server("shipping", "mrtr") as url:
            async with AsyncMCPTestKit(store=store, env={}, poll_interval=30.0) as kit:
                agent = kit.agents([{"harness": "scripted", "models": []}])[0]
                for _ in range(2):
                    handle = await agent.submit(
                        "Book it.",
                        server=binding(url),
                        tools=["shipping:book_shipment"],
                        human_input="managed",
                    )
                    pending = await handle.wait_for_pending(timeout=60)
                    assert pending is not None
                    await handle.respond_elicitation(
                        pending.round_id,
                        {
                            "shipping_address": ElicitationResponse(
                                action="accept", content=address(5)
                            )
                        },
                        idempotency_key=f"k-{pending.round_id}",
                    )
                    result = await handle.result(timeout=60)
                    assert result.outcome is ExecutionOutcome.SUCCEEDED
                # Both executions used the one session, still open for the next one.
                harness = kit.runtime.harnesses["scripted"]
                assert isinstance(harness, ScriptedHarness)
                assert sessions_open(harness) == 1
            assert other_tasks() == set()
    finally:
        store.close()


async def test_a_request_is_one_post_sent_by_its_callers_task(
    tmp_path: Path, crash_target: tuple[list[str], int]
) -> None:
    """While a retry is held by the server, the execution's own task is the one
    waiting on its POST: the shared session runs no task per request (and no writer
    loop), only the ones that own it."""
    command, port = crash_target
    harness = ScriptedHarness()
    with serve_http(command, port) as url:
        server = binding(url, "crash_target")
        marker = tmp_path / "delivered"
        step = OperationStep("tool", "book_resumable", {"marker": str(marker), "hold": 3.0})

        async def answer(round: InputRound) -> Mapping[str, ElicitationResponse]:
            return {"shipping_address": ElicitationResponse(action="accept", content=address(7))}

        run = asyncio.create_task(harness.run(task(server, "exec-held", step), answer))
        while not marker.exists():  # the retry reached the server, which holds it
            assert not run.done(), run.result()
            await asyncio.sleep(0.02)
        # The session's own two: its owner and its dispatcher's (idle) run; with the
        # SDK's transport there were also its writer loop and a task for the POST.
        names = sorted(t.get_name() for t in other_tasks() if t is not run)
        assert names == [
            "m3-shared-mcp-session",
            "m3grpc.harness.contained_http.PostDispatcher.run",
        ], names
        [result] = await asyncio.wait_for(run, 60)
        assert result.ok and text_of(result) == "booked shipment to 7 Main Street, City 7"
        await harness.aclose()
    assert other_tasks() == set()


async def test_an_auto_binding_shares_once_the_server_offered_2026_07_28() -> None:
    """An "auto" binding's first execution negotiates on a session of its own (its
    server answers `server/discover` with 2026-07-28); later ones share one session."""
    harness = ScriptedHarness()
    with http_mcp_server("shipping", "mrtr") as url:
        server = HttpServer(name="shipping", url=url, protocol="auto")
        results: list[OperationResult] = []
        shared: list[int] = []
        for n in range(3):

            async def answer(round: InputRound, n: int = n) -> Mapping[str, ElicitationResponse]:
                response = ElicitationResponse(action="accept", content=address(n))
                return dict.fromkeys(round.requests, response)

            step = OperationStep("tool", "book_shipment")
            [result] = await asyncio.wait_for(harness.run(task(server, f"e-{n}", step), answer), 60)
            results.append(result)
            shared.append(sessions_open(harness))
        await harness.aclose()

    assert shared == [0, 1, 1]
    for n, result in enumerate(results):
        assert result.ok, result
        assert text_of(result) == f"booked shipment to {n} Main Street, City {n}"
    assert other_tasks() == set()


def catalog(ttl_ms: int | None) -> tuple[list[str], int]:
    """The command and port of tests/mcp_servers/catalog.py, its `tools/list` results
    marked fresh for `ttl_ms` (no hint if None)."""
    port = free_port()
    command = [sys.executable, str(MCP_SERVERS / "catalog.py"), "--port", str(port)]
    return command + ([] if ttl_ms is None else ["--tools-ttl-ms", str(ttl_ms)]), port


async def run_tool(
    harness: ScriptedHarness, server: HttpServer, execution_id: str, tool: str
) -> str:
    async def no_input(round: InputRound) -> Mapping[str, ElicitationResponse]:
        raise AssertionError(f"the catalog asked for input: {round}")

    step = OperationStep("tool", tool)
    [result] = await asyncio.wait_for(harness.run(task(server, execution_id, step), no_input), 60)
    return text_of(result)


async def test_a_listing_the_server_marks_fresh_is_shared_by_the_bindings_executions() -> None:
    """A 2026-07-28 `tools/list` result with `ttlMs` is served to the binding's later
    executions from the shared session's cache while it is fresh: the server answers
    one listing for three executions (each asks it which tool to call)."""
    harness = ScriptedHarness()
    command, port = catalog(ttl_ms=600_000)
    with serve_http(command, port) as url:
        server = binding(url, "catalog")
        counts = [await run_tool(harness, server, f"e-{n}", "listings") for n in range(3)]
        await harness.aclose()
    assert counts == ["1", "1", "1"]


async def test_an_unmarked_listing_is_asked_for_by_every_execution() -> None:
    """Without `ttlMs`, each execution lists the tools itself on the shared session, so
    a tool the server added after an earlier execution is found."""
    harness = ScriptedHarness()
    command, port = catalog(ttl_ms=None)
    with serve_http(command, port) as url:
        server = binding(url, "catalog")
        counts = [await run_tool(harness, server, f"e-{n}", "listings") for n in range(3)]
        assert await run_tool(harness, server, "grow", "add_extra") == "added"
        extra = await run_tool(harness, server, "use", "extra")
        assert sessions_open(harness) == 1
        await harness.aclose()
    assert counts == ["1", "2", "3"]
    assert extra == "extra ran"
