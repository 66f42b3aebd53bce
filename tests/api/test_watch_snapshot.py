"""A WatchPending stream's opening snapshot is read from the store a page at a time, as
the stream sends it (`m3grpc/api/watch.py`): a subscriber holds one page, however many
rounds are pending, and gets its first event after one page's read, not after every
pending round was read and copied for it. Rounds that leave pending or become pending
while it pages are still sent exactly once, in order: one pending at the stream's
position is in the snapshot at its place (also when it left before its page was
read), one that became pending after it only live.

In-process, on a real SQLite file; the rounds are stored through the store's API by a
worker of the test's own (a round that only waits needs no MCP server)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from m3grpc import AsyncMCPTestKit
from m3grpc.api import watch as watch_module
from m3grpc.api.watch import PendingWatch, ServiceShuttingDown, WatchEvent
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ManagedInputLease
from tests.storage.conftest import ACCEPT, make_round

PAGE = 3
OWNER = "test-worker"


class Reader:
    def __init__(self, watch: PendingWatch) -> None:
        self.events: list[WatchEvent] = []
        self.task = asyncio.ensure_future(self._read(watch))

    async def _read(self, watch: PendingWatch) -> None:
        with contextlib.suppress(ServiceShuttingDown):
            async for event in watch.stream("", ""):
                self.events.append(event)

    @property
    def keys(self) -> list[tuple[str, str]]:
        found = []
        for event in self.events:
            kind = event.WhichOneof("event")
            if kind == "round_pending":
                found.append(("pending", event.round_pending.round_id))
            elif kind == "round_left_pending":
                found.append(("left", event.round_left_pending.round_id))
            else:
                found.append(("finished", event.execution_finished.execution_id))
        return found


async def until(probe: Any, what: str) -> None:
    for _ in range(1200):  # bounded: at most 60 s
        if probe():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def pending_round(store: SQLiteExecutionStore) -> str:
    """A new execution, claimed by the test's worker, with one pending round."""
    created = store.create_execution(
        {"prompt": "p"}, human_input="managed", claim_for=(OWNER, timedelta(seconds=120))
    )
    assert created.claimed is not None
    lease: ManagedInputLease = created.claimed.lease
    execution_id = created.state.execution_id
    record = store.managed_input_store.create_round(
        make_round(execution_id, store.now, round_id=f"rnd_{uuid.uuid4().hex}"), lease=lease
    )
    return record.round_id


def test_the_snapshot_is_read_a_page_at_a_time_and_stays_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch_module, "_SNAPSHOT_PAGE", PAGE)

    async def scenario() -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        try:
            # No workers: the test's own worker holds the executions.
            async with AsyncMCPTestKit(store=store, env={}, concurrency=0) as kit:
                rounds = [await asyncio.to_thread(pending_round, store) for _ in range(8)]
                shutdown = asyncio.Event()
                watch = PendingWatch(kit.runtime, poll_interval=30.0, shutdown=shutdown)
                runtime = kit.runtime
                pages: list[int] = []
                sent_before_page: list[int] = []
                changed: list[str] = []
                list_rounds = runtime.list_rounds

                async def paged(**query: Any) -> Any:
                    sent_before_page.append(len(reader.events))
                    page = await list_rounds(**query)
                    pages.append(len(page))
                    if len(pages) == 1:
                        # Between the first page and the rest: a round of a later page
                        # leaves pending, so does one the first page holds, and a new
                        # round becomes pending after the stream's position.
                        for round_id in (rounds[4], rounds[1], rounds[7]):
                            await runtime.respond(round_id, ACCEPT, idempotency_key=round_id)
                        changed.append(await asyncio.to_thread(pending_round, store))
                    return page

                runtime.list_rounds = paged  # type: ignore[method-assign]
                reader = Reader(watch)
                await until(lambda: len(reader.events) == 12, "12 events")
                shutdown.set()
                await asyncio.wait_for(reader.task, 30)
                new_round = changed[0]

                # Every page holds at most a page of rounds, and the stream sent the
                # first page's rounds before it read the next.
                assert pages and max(pages) <= PAGE
                assert sent_before_page[0] == 0 and sent_before_page[1] >= 1
                # The snapshot: the 8 rounds pending at its position, oldest first,
                # once each; then the live events, once each.
                assert reader.keys == [
                    *(("pending", r) for r in rounds),
                    ("left", rounds[4]),
                    ("left", rounds[1]),
                    ("left", rounds[7]),
                    ("pending", new_round),
                ]
        finally:
            store.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_streams_that_start_together_read_each_page_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not a copy per subscriber: subscribers opening together (a service restarting,
    # an inbox's browsers) share the pages read for them, and each gets every round.
    monkeypatch.setattr(watch_module, "_SNAPSHOT_PAGE", PAGE)

    async def scenario() -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        try:
            async with AsyncMCPTestKit(store=store, env={}, concurrency=0) as kit:
                rounds = [await asyncio.to_thread(pending_round, store) for _ in range(8)]
                shutdown = asyncio.Event()
                watch = PendingWatch(kit.runtime, poll_interval=30.0, shutdown=shutdown)
                runtime = kit.runtime
                reads: list[int] = []
                list_rounds = runtime.list_rounds

                async def counted(**query: Any) -> Any:
                    page = await list_rounds(**query)
                    reads.append(len(page))
                    return page

                runtime.list_rounds = counted  # type: ignore[method-assign]
                readers = [Reader(watch) for _ in range(5)]
                await until(lambda: all(len(r.events) == 8 for r in readers), "8 events each")
                shutdown.set()
                await asyncio.wait_for(asyncio.gather(*(r.task for r in readers)), 30)
                for reader in readers:
                    assert reader.keys == [("pending", r) for r in rounds]
                assert reads == [3, 3, 2]  # the three pages, once, for all five streams
        finally:
            store.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))
