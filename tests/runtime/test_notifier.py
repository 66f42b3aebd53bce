"""Wake-ups that carry what was committed: the notifier hands a value to its waiters,
and in one process the worker takes a round's answer (and the kit a new pending round)
from the wake-up instead of reading it back from the database."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from m3grpc import AsyncExecutionHandle, AsyncMCPTestKit, ElicitationResponse, HttpServer
from m3grpc.runtime.notifier import EVENTS_KEY, Notifier, wait_for, woken_with
from m3grpc.storage import SQLiteExecutionStore
from m3grpc.storage.loop_calls import suspend
from m3grpc.types import ExecutionOutcome
from tests.runtime.conftest import text_of
from tests.support.mcp_processes import http_mcp_server

ADDRESS = ElicitationResponse(action="accept", content={"street": "1 Main Street", "city": "Pune"})


async def submit_booking(kit: AsyncMCPTestKit, url: str) -> AsyncExecutionHandle:
    """A managed execution of the shipping server's booking (2026-07-28 over HTTP)."""
    agent = kit.agents([{"harness": "scripted", "models": []}])[0]
    binding = HttpServer(name="shipping", url=url, protocol="2026-07-28")
    return await agent.submit(
        "Book the shipment.",
        server=binding,
        tools=["shipping:book_shipment"],
        human_input="managed",
    )


def test_a_value_notified_from_another_thread_reaches_every_waiter() -> None:
    async def scenario() -> None:
        notifier = Notifier(asyncio.get_running_loop())
        first, second = notifier.register("k"), notifier.register("k")
        other = notifier.register("other")
        thread = threading.Thread(target=notifier.notify, args=("k", {"answer": 42}))
        thread.start()
        assert await wait_for(first, 5) and await wait_for(second, 5)
        thread.join()
        assert woken_with(first) == woken_with(second) == {"answer": 42}
        # Another key is not woken; a wake-up without a value carries None.
        assert not other.done() and woken_with(other) is None
        notifier.notify("other")
        assert await wait_for(other, 5) and woken_with(other) is None

    asyncio.run(scenario())


def test_a_batch_wakes_the_event_log_readers_after_the_others() -> None:
    # A store thread's batch goes to the loop at its exit, as one callback: the
    # commit's EVENTS_KEY wake-up (notified first, by the commit) is issued after
    # the answered round's, so the worker resumes ahead of the WatchPending streams.
    async def scenario() -> None:
        notifier = Notifier(asyncio.get_running_loop())
        events, answered = notifier.register(EVENTS_KEY), notifier.register("round")
        order: list[str] = []
        events.add_done_callback(lambda _: order.append("events"))
        answered.add_done_callback(lambda _: order.append("round"))
        held: list[bool] = []

        def commit() -> None:
            with notifier.batched():
                notifier.notify(EVENTS_KEY)
                notifier.notify("round", {"answer": 42})
                notifier.notify(EVENTS_KEY)  # another commit's, in the same batch
                held.append(events.done() or answered.done())

        thread = threading.Thread(target=commit)
        thread.start()
        assert await wait_for(answered, 5) and await wait_for(events, 5)
        thread.join()
        await asyncio.sleep(0)  # the done callbacks run
        assert held == [False]  # nothing was issued before the batch's end
        assert order == ["round", "events"]
        assert woken_with(answered) == {"answer": 42}
        # A batch on the loop's thread wakes at once.
        late = notifier.register("k")
        with notifier.batched():
            notifier.notify("k", 1)
            assert woken_with(late) == 1

    asyncio.run(scenario())


def test_a_respond_wakes_the_waiting_worker_before_the_event_log_readers(
    tmp_path: Path,
) -> None:
    """The Respond's commit wakes the readers of the event log (its round_changed
    event) and the worker waiting on the round: the worker's wake-up comes first,
    in the same loop callback, so the streams do not run ahead of the delivery."""

    async def scenario(url: str) -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        try:
            async with AsyncMCPTestKit(store=store, env={}, poll_interval=30.0) as kit:
                handle = await submit_booking(kit, url)
                pending = await handle.wait_for_pending(timeout=60)
                assert pending is not None
                notifier = kit.runtime.notifier
                order: list[tuple[str, bool]] = []
                # Woken by the same wake-up as the worker, which registered earlier.
                answered = notifier.register(pending.round_id)
                events = notifier.register(EVENTS_KEY)
                answered.add_done_callback(lambda _: order.append(("round", events.done())))
                events.add_done_callback(lambda _: order.append(("events", answered.done())))
                await handle.respond_elicitation(
                    pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="a"
                )
                assert await wait_for(answered, 20) and await wait_for(events, 20)
                await asyncio.sleep(0)
                # One callback woke both; the round's waiters first.
                assert order == [("round", True), ("events", True)]
                result = await handle.result(timeout=20)
                assert result.outcome is ExecutionOutcome.SUCCEEDED
        finally:
            store.close()

    with http_mcp_server("shipping", "mrtr") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 120))


def test_a_reader_ahead_of_the_write_waits_for_what_it_hands_over() -> None:
    # A reader of the event log may reach a write's event as soon as it is
    # committed, before the store call's result reaches the loop: it must wait for
    # the value, not find nothing and read the store back.
    async def scenario() -> None:
        notifier = Notifier(asyncio.get_running_loop())
        assert await notifier.handed_over("k") is None  # no write of this process: read
        committed, returned = asyncio.Event(), asyncio.Event()

        async def write(key: str, value: object) -> None:
            with notifier.handing_over(key) as hand_over:
                committed.set()  # its event is in the log from here on
                await returned.wait()  # the store call's result has not arrived yet
                if value is None:
                    raise RuntimeError("the write failed")
                hand_over(value)

        writer = asyncio.create_task(write("k", {"record": 1}))
        await committed.wait()
        gone, reader = (asyncio.create_task(notifier.handed_over("k")) for _ in range(2))
        await asyncio.sleep(0.05)
        assert not reader.done()
        gone.cancel()  # one reader going away leaves the others waiting
        returned.set()
        assert await reader == {"record": 1}
        await writer
        assert await notifier.handed_over("k") == {"record": 1}  # kept for later readers

        # A write that fails hands over nothing: its waiting readers read the store.
        committed.clear()
        returned.clear()
        failing = asyncio.create_task(write("f", None))
        await committed.wait()
        reader = asyncio.create_task(notifier.handed_over("f"))
        await asyncio.sleep(0.05)
        returned.set()
        assert await reader is None
        with pytest.raises(RuntimeError):
            await failing
        assert await notifier.handed_over("f") is None

    asyncio.run(scenario())


def test_in_process_respond_and_pause_are_not_read_back(tmp_path: Path) -> None:
    """Between the answer and the result the worker never reads the round back; the
    kit's wait for the pause is answered from the round the worker stored, and its
    wait for the result from the result the worker stored."""

    async def scenario(url: str) -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        rounds = store.managed_input_store
        reads: list[str] = []

        def counted(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                reads.append(name)
                return call(*args, **kwargs)

            return wrapper

        try:
            async with AsyncMCPTestKit(store=store, env={}, poll_interval=30.0) as kit:
                handle = await submit_booking(kit, url)
                rounds.list_rounds = counted("list_rounds", rounds.list_rounds)  # type: ignore[method-assign]
                pending = await handle.wait_for_pending(timeout=60)
                assert pending is not None
                # At most the first look (before the round existed) read the rounds.
                assert reads.count("list_rounds") <= 1
                rounds.get_round = counted("get_round", rounds.get_round)  # type: ignore[method-assign]
                store.get_result = counted("get_result", store.get_result)  # type: ignore[method-assign]
                reads.clear()
                await handle.respond_elicitation(
                    pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="a"
                )
                result = await handle.result(timeout=60)
                assert result.outcome is ExecutionOutcome.SUCCEEDED
                assert "Pune" in text_of(result.operations[0].result)
                assert "get_round" not in reads
                # At most the first look (before the finish) read the result; the one
                # handed over is the one stored.
                assert reads.count("get_result") <= 1
                assert result == store.get_result(handle.execution_id)
        finally:
            store.close()

    # The poll interval is far above the test's length: no poll finds the answer.
    with http_mcp_server("shipping", "mrtr") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 120))


def test_the_worker_gets_the_answer_of_a_respond_cancelled_while_it_commits(
    tmp_path: Path,
) -> None:
    """The thread that stored an answer wakes the worker waiting on its round: a
    Respond whose caller goes away while the write commits still hands the answer
    over (no read back), instead of leaving the worker to a poll 30 s later."""

    async def scenario(url: str) -> None:
        store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
        rounds = store.managed_input_store
        loop = asyncio.get_running_loop()
        committed, release = asyncio.Event(), asyncio.Event()
        reads: list[str] = []
        submit = rounds.submit_responses_detailed
        get_round = rounds.get_round

        def held_after_commit(*args: Any, **kwargs: Any) -> Any:
            # On SQLite the store call runs in a greenlet on the loop: it waits
            # there as a store thread would, without blocking the loop.
            submission = submit(*args, **kwargs)  # durable once this returns
            loop.call_soon(committed.set)
            suspend(asyncio.wait_for(release.wait(), 30))
            return submission

        def counted(*args: Any, **kwargs: Any) -> Any:
            reads.append("get_round")
            return get_round(*args, **kwargs)

        try:
            async with AsyncMCPTestKit(store=store, env={}, poll_interval=30.0) as kit:
                handle = await submit_booking(kit, url)
                pending = await handle.wait_for_pending(timeout=60)
                assert pending is not None
                rounds.submit_responses_detailed = held_after_commit  # type: ignore[method-assign]
                rounds.get_round = counted  # type: ignore[method-assign]
                caller = asyncio.create_task(
                    handle.respond_elicitation(
                        pending.round_id, {"shipping_address": ADDRESS}, idempotency_key="a"
                    )
                )
                await committed.wait()
                caller.cancel()  # the caller goes away; its write has committed
                with pytest.raises(asyncio.CancelledError):
                    await caller
                release.set()
                # Bounded far below the 30 s poll: only the hand-over can wake it.
                result = await handle.result(timeout=20)
                assert result.outcome is ExecutionOutcome.SUCCEEDED
                assert "Pune" in text_of(result.operations[0].result)
                assert reads == []
        finally:
            release.set()
            store.close()

    with http_mcp_server("shipping", "mrtr") as url:
        asyncio.run(asyncio.wait_for(scenario(url), 120))


def test_a_wait_that_times_out_carries_no_value() -> None:
    async def scenario() -> None:
        notifier = Notifier(asyncio.get_running_loop())
        wake = notifier.register("k")
        assert not await wait_for(wake, 0.01)
        assert woken_with(wake) is None
        assert not await wait_for(wake, 5)  # still timed out, at once
        notifier.notify("k", {"late": True})  # a wake-up after the timeout changes nothing
        await asyncio.sleep(0)
        assert woken_with(wake) is None
        notifier.unregister("k", wake)
        # A waiter cancelled while it waits leaves nothing behind for later wake-ups.
        cancelled = notifier.register("k")
        waiter = asyncio.create_task(wait_for(cancelled, None))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        notifier.unregister("k", cancelled)
        notifier.notify("k", 1)
        fresh = notifier.register("k")
        notifier.notify("k", 2)
        assert await wait_for(fresh, 5) and woken_with(fresh) == 2

    asyncio.run(scenario())
