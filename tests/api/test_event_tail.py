"""WatchPending streams of one process share one reader of the event log
(`m3grpc/api/event_tail.py`): every stream still gets every event it may see,
exactly once and in order, while the store is read once per wake-up rather than
once per stream; a stream behind the shared buffer reads the store until it
catches up. In-process, on a real SQLite file and a real Streamable HTTP MCP server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from m3grpc import AsyncExecutionHandle, AsyncMCPTestKit, HttpServer
from m3grpc.api.tokens import Cursor, cursor_token
from m3grpc.api.watch import PendingWatch, ServiceShuttingDown, WatchEvent
from m3grpc.runtime.local_wakes import HUB, link_pair
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome
from m3grpc.wire.messages import pending_round_model
from tests.runtime.conftest import confirmed_shipment_answers
from tests.support.mcp_processes import http_mcp_server

STREAMS = 12
Key = tuple[str, ...]


def key(event: WatchEvent) -> Key:
    kind = event.WhichOneof("event")
    if kind == "round_pending":
        return ("pending", event.round_pending.execution_id, event.round_pending.round_id)
    if kind == "round_left_pending":
        left = event.round_left_pending
        return ("left", left.execution_id, left.round_id)
    return ("finished", event.execution_finished.execution_id)


class Reader:
    """Reads one stream into a list, in a task of its own."""

    def __init__(self, stream: AsyncIterator[WatchEvent]) -> None:
        self.events: list[WatchEvent] = []
        self.task = asyncio.ensure_future(self._read(stream))

    async def _read(self, stream: AsyncIterator[WatchEvent]) -> None:
        with contextlib.suppress(ServiceShuttingDown):  # how each test ends its streams
            async for event in stream:
                self.events.append(event)

    @property
    def keys(self) -> list[Key]:
        return [key(event) for event in self.events]


async def until(probe: Any, what: str) -> None:
    for _ in range(1200):  # bounded: at most 60 s
        if probe():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def submit(kit: AsyncMCPTestKit, binding: HttpServer) -> AsyncExecutionHandle:
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    return await agent.submit(
        "Book the shipment.",
        server=binding,
        tools=["shipping:book_confirmed_shipment"],
        human_input="managed",
    )


async def answer_to_the_end(handle: AsyncExecutionHandle) -> str:
    """Answers each of the execution's rounds (two) through the kit; waits for its finish."""
    async for pending in handle.pending_rounds():
        await handle.respond_elicitation(
            pending.round_id,
            confirmed_shipment_answers(pending),
            idempotency_key=f"k-{pending.round_id}",
        )
    result = await handle.result(timeout=60)
    assert result.outcome is ExecutionOutcome.SUCCEEDED
    return handle.execution_id


async def run_execution(kit: AsyncMCPTestKit, binding: HttpServer) -> str:
    return await answer_to_the_end(await submit(kit, binding))


@contextlib.asynccontextmanager
async def watching(
    tmp_path: Path, url: str, *, buffered_events: int = 8192
) -> AsyncIterator[tuple[AsyncMCPTestKit, HttpServer, PendingWatch, asyncio.Event]]:
    """A kit on a real SQLite file, a legacy binding to `url`, and a PendingWatch on the
    kit's runtime (with its shutdown event, which ends its streams)."""
    store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
    try:
        # The poll interval is far above a test's length: streams move on wake-ups.
        async with AsyncMCPTestKit(store=store, env={}, poll_interval=30.0) as kit:
            binding = HttpServer(name="shipping", url=url, protocol="legacy")
            shutdown = asyncio.Event()
            watch = PendingWatch(
                kit.runtime,
                poll_interval=30.0,
                shutdown=shutdown,
                buffered_events=buffered_events,
            )
            yield kit, binding, watch, shutdown
    finally:
        store.close()


def expected_keys(execution_id: str, events: list[Key]) -> list[Key]:
    return [event for event in events if event[1] == execution_id]


def test_streams_share_one_read_of_the_log(tmp_path: Path) -> None:
    async def scenario(url: str) -> None:
        async with watching(tmp_path, url) as (kit, binding, watch, shutdown):
            readers = [Reader(watch.stream("", "")) for _ in range(STREAMS)]
            stranger = Reader(watch.stream("", "", principal="someone-else"))
            await until(lambda: watch.active == STREAMS + 1, "the streams to open")

            first = await run_execution(kit, binding)
            await until(lambda: all(("finished", first) in r.keys for r in readers), "the first")
            # From here on every stream is served from the shared buffer.
            store_reads = 0
            read_store = kit.runtime.events_after

            async def counted(*args: Any, **kwargs: Any) -> Any:
                nonlocal store_reads
                store_reads += 1
                return await read_store(*args, **kwargs)

            kit.runtime.events_after = counted  # type: ignore[method-assign]
            handle = await submit(kit, binding)
            # Opened while the execution waits, so no event lands during its opening
            # snapshot: one that did was read from the log, by design, to place the
            # snapshot exactly (a CI run saw that read: 1 of 12 runs here).
            assert await handle.wait_for_pending(60) is not None
            filtered = Reader(watch.stream(handle.execution_id, ""))
            await until(lambda: filtered.keys, "the filtered stream's snapshot")
            later = [await answer_to_the_end(handle), await run_execution(kit, binding)]
            await until(lambda: all(("finished", later[-1]) in r.keys for r in readers), "the rest")
            await asyncio.wait_for(filtered.task, 60)  # it ends with its execution

            seen = readers[0].keys
            for execution_id in (first, *later):
                mine = expected_keys(execution_id, seen)
                # Two rounds, each pending then left pending, then the finish.
                assert [k[0] for k in mine] == [
                    "pending",
                    "left",
                    "pending",
                    "left",
                    "finished",
                ], mine
            for reader in readers:
                assert reader.keys == seen  # the same events, once each, in order
            assert filtered.keys == expected_keys(later[0], seen)
            assert stranger.events == []  # another principal sees none of them
            assert store_reads == 0
            shutdown.set()
            await asyncio.wait_for(asyncio.gather(*(r.task for r in (*readers, stranger))), 30)
            assert watch.active == 0

    with http_mcp_server("shipping", "legacy") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 180))


def test_a_stream_behind_the_buffer_reads_the_store_until_it_catches_up(tmp_path: Path) -> None:
    async def scenario(url: str) -> None:
        # A buffer of two events: far less than three executions write.
        async with watching(tmp_path, url, buffered_events=2) as (kit, binding, watch, shutdown):
            live = Reader(watch.stream("", ""))
            await until(lambda: watch.active == 1, "the stream to open")
            executions = [await run_execution(kit, binding) for _ in range(2)]
            await until(lambda: ("finished", executions[-1]) in live.keys, "the finish")
            # Resume from the first event's cursor while the live stream stays open:
            # the events after it are older than the buffer.
            resumed = Reader(watch.stream("", live.events[0].cursor))
            executions.append(await run_execution(kit, binding))
            await until(lambda: ("finished", executions[-1]) in live.keys, "the last")
            await until(lambda: ("finished", executions[-1]) in resumed.keys, "resumed")
            assert len(live.keys) == 15
            assert resumed.keys == live.keys[1:]
            shutdown.set()
            await asyncio.wait_for(asyncio.gather(live.task, resumed.task), 30)
            assert watch.active == 0

    with http_mcp_server("shipping", "legacy") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 180))


def test_what_this_process_committed_is_sent_without_reading_it_back(tmp_path: Path) -> None:
    # A round_pending event carries the round this process just stored, an
    # execution_finished one the state it just finished with: the same messages a
    # stream of another process builds from the store.
    async def live_run(url: str) -> list[WatchEvent]:
        async with watching(tmp_path, url) as (kit, binding, watch, shutdown):
            live = Reader(watch.stream("", ""))
            await until(lambda: watch.active == 1, "the stream to open")
            reads: list[str] = []
            runtime = kit.runtime
            get_round, snapshot = runtime.get_round, runtime.snapshot

            async def counted_get_round(round_id: str) -> Any:
                reads.append(f"round {round_id}")
                return await get_round(round_id)

            async def counted_snapshot(execution_id: str) -> Any:
                reads.append(f"execution {execution_id}")
                return await snapshot(execution_id)

            runtime.get_round = counted_get_round  # type: ignore[method-assign]
            runtime.snapshot = counted_snapshot  # type: ignore[method-assign]
            execution_id = (await submit(kit, binding)).execution_id
            # Answered from the stream's own events: nothing here reads the store.
            for answered in range(2):
                seen = 2 * answered + 1
                await until(lambda n=seen: len(live.keys) == n, "a pending round")
                pending = pending_round_model(live.events[-1].round_pending)
                await runtime.respond(
                    pending.round_id,
                    confirmed_shipment_answers(pending),
                    idempotency_key=f"k-{pending.round_id}",
                )
            await until(lambda: ("finished", execution_id) in live.keys, "the finish")
            assert [k[0] for k in live.keys] == ["pending", "left", "pending", "left", "finished"]
            assert reads == []
            shutdown.set()
            await asyncio.wait_for(live.task, 30)
            return live.events

    async def read_back(url: str) -> list[WatchEvent]:
        # Another kit on the same file, resuming from the log's start: its stream
        # reads every record from the store.
        async with watching(tmp_path, url) as (_kit, _binding, watch, shutdown):
            replay = Reader(watch.stream("", cursor_token(Cursor(seq=0, execution_id=""))))
            await until(lambda: len(replay.keys) == 5, "the replayed events")
            shutdown.set()
            await asyncio.wait_for(replay.task, 30)
            return replay.events

    with http_mcp_server("shipping", "legacy") as url:
        live = asyncio.run(asyncio.wait_for(live_run(url), 180))
        replayed = asyncio.run(asyncio.wait_for(read_back(url), 180))
    assert replayed == live


def test_this_process_commits_join_the_buffer_without_reading_the_log(tmp_path: Path) -> None:
    # On SQLite the store hands over what each commit of this process appended: the
    # log is read when the reader starts and once per execution, to learn whose it
    # is (the kit submits without telling the reader); every later event of it is
    # taken as handed over. Streams still get every event they may see.
    async def scenario(url: str) -> None:
        async with watching(tmp_path, url) as (kit, binding, watch, shutdown):
            live = Reader(watch.stream("", ""))
            stranger = Reader(watch.stream("", "", principal="someone-else"))
            await until(lambda: watch.active == 2, "the streams to open")
            executions = [await run_execution(kit, binding) for _ in range(3)]
            await until(lambda: ("finished", executions[-1]) in live.keys, "the last finish")
            for execution_id in executions:
                mine = expected_keys(execution_id, live.keys)
                assert [k[0] for k in mine] == ["pending", "left", "pending", "left", "finished"]
            # Each execution commits 5 events and more round changes; read back one by
            # one, the reader would read the log after every one of those commits.
            assert watch.log_reads == 1 + len(executions)
            assert stranger.events == []
            shutdown.set()
            await asyncio.wait_for(asyncio.gather(live.task, stranger.task), 30)

    with http_mcp_server("shipping", "legacy") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 180))


def test_with_linked_worker_processes_every_wake_up_reads_the_log(tmp_path: Path) -> None:
    # Linked worker processes (`workers.processes`, m3grpc/runtime/local_wakes.py)
    # commit events this process is not handed: a wake-up may come from one of them,
    # so the reader reads the log then instead of trusting what was handed over.
    async def scenario(url: str) -> None:
        service_end, worker_end = link_pair()
        async with watching(tmp_path, url) as (kit, binding, watch, shutdown):
            HUB.connect([service_end])
            try:
                live = Reader(watch.stream("", ""))
                await until(lambda: watch.active == 1, "the stream to open")
                executions = [await run_execution(kit, binding) for _ in range(3)]
                await until(lambda: ("finished", executions[-1]) in live.keys, "the last finish")
                kinds = ["pending", "left", "pending", "left", "finished"]
                for execution_id in executions:
                    assert [k[0] for k in expected_keys(execution_id, live.keys)] == kinds
                # Unlinked, it reads 1 + one per execution (the test above).
                assert watch.log_reads > 2 * len(executions)
                shutdown.set()
                await asyncio.wait_for(live.task, 30)
            finally:
                HUB.close()
                worker_end.close()

    with http_mcp_server("shipping", "legacy") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 180))


def test_internal_round_changes_wake_no_stream(tmp_path: Path) -> None:
    # A round's delivery and resolve commit round_changed events, which no stream
    # sends: they advance the shared buffer without waking the streams (which skip
    # them when an event they send wakes them), so only the events sent wake them.
    async def scenario(url: str) -> None:
        async with watching(tmp_path, url) as (kit, binding, watch, shutdown):
            live = Reader(watch.stream("", ""))
            await until(lambda: watch.active == 1, "the stream to open")
            woken = watch.stream_wakes
            executions = [await run_execution(kit, binding) for _ in range(2)]
            await until(lambda: ("finished", executions[-1]) in live.keys, "the last finish")
            sent = len(live.keys)
            assert sent == 10  # per execution: 2 x (pending, left), finished
            # At most one wake per event sent (some commits' events share one), and
            # the reader's start.
            assert watch.stream_wakes - woken <= sent + 1
            # The position still moves past them: a resumed stream from the last
            # cursor gets nothing more.
            resumed = Reader(watch.stream("", live.events[-1].cursor))
            executions.append(await run_execution(kit, binding))
            await until(lambda: ("finished", executions[-1]) in resumed.keys, "the third")
            await until(lambda: ("finished", executions[-1]) in live.keys, "the third, live")
            assert resumed.keys == live.keys[sent:]
            shutdown.set()
            await asyncio.wait_for(asyncio.gather(live.task, resumed.task), 30)

    with http_mcp_server("shipping", "legacy") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 180))
