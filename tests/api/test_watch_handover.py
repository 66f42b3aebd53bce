"""Over gRPC, WatchPending's one reader of the event log takes the events this
service commits as the store hands them over (`m3grpc/api/event_tail.py`): an
execution submitted here is known to be its submitter's, so none of its events
is read back, and a stream still sees exactly what its principal may. A real
`start_service` on a SQLite file, real gRPC on loopback, a real Streamable HTTP
MCP server."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from pathlib import Path

from m3grpc.api.config import ServiceConfig
from m3grpc.api.server import start_service
from m3grpc.client import AsyncRemoteMCPTestKit, ExecutionFinished, RoundLeftPending, RoundPending
from m3grpc.types import ExecutionOutcome
from m3grpc.wire.events import WatchEvent
from tests.runtime.conftest import confirmed_shipment_answers
from tests.support.mcp_processes import http_mcp_server

TOKENS = {"alice": "alice-secret-token", "bob": "bob-secret-token"}


def config(tmp_path: Path, url: str) -> ServiceConfig:
    return ServiceConfig.model_validate(
        {
            "database": str(tmp_path / "m3.sqlite"),
            "listen": "127.0.0.1:0",
            "watch_poll_interval_seconds": 30.0,  # streams move on wake-ups only
            "servers": {"shipping": {"url": url, "protocol": "legacy"}},
            "auth": {
                "tokens": [
                    {
                        "principal": name,
                        "hash": "sha256:" + hashlib.sha256(secret.encode()).hexdigest(),
                    }
                    for name, secret in TOKENS.items()
                ]
            },
        }
    )


async def collect(kit: AsyncRemoteMCPTestKit, into: list[WatchEvent]) -> None:
    async for event in kit.watch_pending():
        into.append(event)


def kinds(events: list[WatchEvent], execution_id: str) -> list[str]:
    names = {RoundPending: "pending", RoundLeftPending: "left", ExecutionFinished: "finished"}
    found = []
    for event in events:
        if isinstance(event, RoundPending):
            owner = event.round.execution_id
        elif isinstance(event, ExecutionFinished):
            owner = event.state.execution_id
        else:
            owner = event.execution_id
        if owner == execution_id:
            found.append(names[type(event)])
    return found


def test_a_submitted_execution_is_watched_without_reading_its_events_back(
    tmp_path: Path,
) -> None:
    async def scenario(url: str) -> None:
        service = await start_service(config(tmp_path, url))
        assert service.watch is not None
        alice = AsyncRemoteMCPTestKit(service.address, token=TOKENS["alice"])
        bob = AsyncRemoteMCPTestKit(service.address, token=TOKENS["bob"])
        seen: list[WatchEvent] = []
        bob_saw: list[WatchEvent] = []
        streams = [
            asyncio.ensure_future(collect(alice, seen)),
            asyncio.ensure_future(collect(bob, bob_saw)),
        ]
        try:
            for _ in range(600):  # bounded: at most 30 s
                if service.watch.active == 2 and service.watch.log_reads >= 1:
                    break
                await asyncio.sleep(0.05)
            started = service.watch.log_reads  # the reader's first read, at its start
            agent = alice.agents([{"harness": "scripted", "models": []}])[0]
            handle = await agent.submit(
                "Book the shipment.",
                server="shipping",
                tools=["shipping:book_confirmed_shipment"],
                human_input="managed",
            )
            async for event in handle.watch_pending():
                if isinstance(event, RoundPending):
                    await handle.respond_elicitation(
                        event.round.round_id,
                        confirmed_shipment_answers(event.round),
                        idempotency_key=f"k-{event.round.round_id}",
                    )
                elif isinstance(event, ExecutionFinished):
                    break
            result = await handle.result(timeout=60)
            assert result.outcome is ExecutionOutcome.SUCCEEDED
            for _ in range(600):
                if "finished" in kinds(seen, handle.execution_id):
                    break
                await asyncio.sleep(0.05)
            assert kinds(seen, handle.execution_id) == [
                "pending",
                "left",
                "pending",
                "left",
                "finished",
            ]
            assert bob_saw == []  # another principal's execution: none of its events
            assert service.watch.log_reads == started
        finally:
            for stream in streams:
                stream.cancel()
                with contextlib.suppress(BaseException):
                    await stream
            await alice.close()
            await bob.close()
            await service.stop(0)

    with http_mcp_server("shipping", "legacy") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 180))
