"""Group commit for writers on an event loop (m3grpc/storage/group_commit.py): a
SQLite runtime's store calls run in greenlets on the loop's thread
(m3grpc/runtime/offload.py), and their writes group as threads' do: one shared
transaction and one commit for the writes that meet, each caller seeing only its
own outcome, none returning before the commit holding its write is durable, and
the loop never blocked while a commit or another process's write lock is waited for."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from m3grpc.errors import ConflictKind, ManagedInputConflict, StorageUnavailableError
from m3grpc.runtime.offload import offload, store_calls_on_loop
from m3grpc.storage.engine import write_transaction
from m3grpc.storage.group_commit import MAX_GROUP
from m3grpc.storage.loop_calls import calls_finished
from tests.storage.probe import count_commits, hold_the_turn, probe_engine, stored
from tests.storage.probe import insert as insert_probe


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    yield from probe_engine(tmp_path)


def insert(engine: sa.Engine, *values: int, then: Exception | None = None) -> str:
    """A store call: one write; returns the name of the thread it ran on."""
    insert_probe(engine, *values, then=then)
    return threading.current_thread().name


def on_loop(scenario: Callable[[], Awaitable[None]]) -> None:
    async def run() -> None:
        with store_calls_on_loop(True):
            await scenario()

    asyncio.run(asyncio.wait_for(run(), 60))


async def outcome(call: Awaitable[Any]) -> tuple[str, Any]:
    try:
        return ("ok", await call)
    except Exception as exc:
        return ("error", exc)


def test_writes_that_meet_share_one_commit_each_with_its_own_outcome(engine: sa.Engine) -> None:
    commits = count_commits(engine)
    refusal = ManagedInputConflict("refused", conflict_kind=ConflictKind.CONCURRENT_UPDATE)

    async def scenario() -> None:
        outcomes = await asyncio.gather(
            outcome(offload(insert, engine, 1)),
            outcome(offload(insert, engine, 2, 1)),  # the constraint refuses the second 1
            outcome(offload(insert, engine, 3, then=refusal)),
            outcome(offload(insert, engine, 4)),
        )
        main = threading.current_thread().name
        assert outcomes[0] == ("ok", main)  # run on the loop's thread, not a store thread
        assert outcomes[3] == ("ok", main)
        kind, error = outcomes[1]
        assert kind == "error" and isinstance(error, StorageUnavailableError), error
        assert outcomes[2] == ("error", refusal)  # its own exception, as raised

    on_loop(scenario)
    assert commits[0] == 1
    assert stored(engine) == [1, 4]  # neither 2 nor 3: their writes were undone


def test_a_write_that_ends_the_shared_transaction_fails_every_write_in_it(
    engine: sa.Engine,
) -> None:
    async def scenario() -> None:
        earlier = asyncio.ensure_future(outcome(offload(insert, engine, 1)))
        ender = asyncio.ensure_future(outcome(offload(insert, engine, 666)))
        later = asyncio.ensure_future(outcome(offload(insert, engine, 2)))
        for name, task in (("earlier", earlier), ("ender", ender)):
            kind, error = await task
            assert kind == "error" and isinstance(error, StorageUnavailableError), (name, error)
        # Not in the transaction SQLite rolled back: it joined no group that failed.
        assert (await later)[0] == "ok"

    on_loop(scenario)
    assert stored(engine) == [2]


def test_writes_arriving_during_a_commit_form_the_next_group(engine: sa.Engine) -> None:
    commits = count_commits(engine)

    async def scenario() -> None:
        first = asyncio.ensure_future(offload(insert, engine, 0))
        await asyncio.sleep(0)  # the first group opens and its commit starts
        await asyncio.sleep(0)
        rest = [
            asyncio.ensure_future(offload(insert, engine, n)) for n in range(1, 2 * MAX_GROUP + 1)
        ]
        await asyncio.gather(first, *rest)

    on_loop(scenario)
    assert stored(engine) == list(range(2 * MAX_GROUP + 1))
    # Grouped (at most MAX_GROUP a commit), not one commit per write.
    assert 3 <= commits[0] <= 2 + 2 * MAX_GROUP // 4, commits[0]


def test_a_write_is_durable_when_its_call_returns(engine: sa.Engine, tmp_path: Path) -> None:
    async def scenario() -> None:
        for n in range(5):
            await offload(insert, engine, n)
            # Another connection (as another process would) sees it at once.
            with sqlite3.connect(tmp_path / "m3.sqlite") as other:
                assert (n,) in list(other.execute("SELECT x FROM probe"))

    on_loop(scenario)


def test_loop_and_thread_writers_take_turns_without_deadlock(engine: sa.Engine) -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        threads = [loop.run_in_executor(None, insert, engine, 1000 + n) for n in range(20)]
        loops = [offload(insert, engine, n) for n in range(20)]
        await asyncio.gather(*threads, *loops)

    on_loop(scenario)
    assert stored(engine) == list(range(20)) + list(range(1000, 1020))


def test_a_write_inside_another_in_one_store_call_is_refused(engine: sa.Engine) -> None:
    def nested() -> None:
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("INSERT INTO probe VALUES (1)")
            with pytest.raises(RuntimeError), write_transaction(engine):
                pass

    async def scenario() -> None:
        await offload(nested)

    on_loop(scenario)
    assert stored(engine) == [1]


def test_a_caller_cancelled_while_waiting_gets_its_write_done_as_on_a_thread(
    engine: sa.Engine,
) -> None:
    async def scenario() -> None:
        calls = [asyncio.ensure_future(offload(insert, engine, n)) for n in range(3)]
        await asyncio.sleep(0)
        calls[1].cancel()
        with pytest.raises(asyncio.CancelledError):
            await calls[1]
        await asyncio.gather(calls[0], calls[2])
        # The call itself went on (a store call is not cut short): its write is stored.
        for _ in range(100):
            if stored(engine) == [0, 1, 2]:
                break
            await asyncio.sleep(0.01)

    on_loop(scenario)
    assert stored(engine) == [0, 1, 2]


def _write_in_a_thread(engine: sa.Engine, value: int) -> None:
    """A thread's write of `value`; fails if it still waits after 30 s."""
    writer = threading.Thread(target=insert_probe, args=(engine, value), daemon=True)
    writer.start()
    writer.join(30)
    assert not writer.is_alive(), "the thread's write still waits"


def _close_a_loop_with_its_group_open(engine: sa.Engine, value: int) -> None:
    """On this thread, a loop whose write of `value` is in its open group, the commit
    to come, closed then (without its remaining tasks run: as `loop.close()` after a
    `stop()`)."""
    loop = asyncio.new_event_loop()
    calls: list[asyncio.Future[Any]] = []

    async def scenario() -> None:
        with store_calls_on_loop(True):
            calls.append(asyncio.ensure_future(offload(insert, engine, value)))
            await asyncio.sleep(0)  # its write is in the open group, the commit to come

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert not calls[0].done()


def test_a_loop_closed_after_its_calls_ended_leaves_the_turn_to_other_writers(
    engine: sa.Engine,
) -> None:
    """A write whose caller was cancelled goes on only while its loop runs. A loop
    closed without cancelling its tasks (the sync kit's, after its runtime stopped)
    must first wait for it (`calls_finished`, as `Runtime.stop` does): else its group
    never commits and the store's write turn stays with the closed loop, and the next
    writer, a thread, waits for it for good."""
    loop = asyncio.new_event_loop()

    async def scenario() -> None:
        with store_calls_on_loop(True):
            call = asyncio.ensure_future(offload(insert, engine, 1))
            await asyncio.sleep(0)  # its write is in the open group, the commit to come
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await calls_finished()

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
    _write_in_a_thread(engine, 2)
    assert stored(engine) == [1, 2]


def test_another_processs_write_lock_is_waited_for_off_the_loop(
    engine: sa.Engine, tmp_path: Path
) -> None:
    other = sqlite3.connect(tmp_path / "m3.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write lock
    other.execute("INSERT INTO probe VALUES (100)")

    async def scenario() -> None:
        write = asyncio.ensure_future(offload(insert, engine, 1))
        # The loop goes on meanwhile: these ticks would not run if BEGIN blocked it.
        ticks = 0
        started = time.monotonic()
        while time.monotonic() - started < 0.3:
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks >= 10 and not write.done()
        other.execute("COMMIT")
        await write

    try:
        on_loop(scenario)
    finally:
        other.close()
    assert stored(engine) == [1, 100]


def test_a_blocking_write_on_the_loops_thread_while_its_writers_hold_the_turn_is_refused(
    engine: sa.Engine,
) -> None:
    # It would wait for a turn that only the loop it blocks can pass on.
    async def scenario() -> None:
        write = asyncio.ensure_future(offload(insert, engine, 1))
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the loop's group is committing now
        with pytest.raises(RuntimeError):
            insert(engine, 2)
        await write

    on_loop(scenario)
    assert stored(engine) == [1]


def test_a_loop_closed_with_its_group_open_gives_the_turn_back(engine: sa.Engine) -> None:
    """A loop closed abruptly (without its remaining tasks run: `loop.close()` after a
    `stop()`) while its group was open never commits it. Its writers never returned, so
    nothing was acknowledged; the turn is taken back from the closed loop instead of
    being held from every other writer of the store for good: a thread's, and one on
    the next loop."""
    _close_a_loop_with_its_group_open(engine, 1)
    _write_in_a_thread(engine, 2)

    async def next_loop() -> None:
        await offload(insert, engine, 3)

    on_loop(next_loop)
    assert stored(engine) == [2, 3]


def test_a_loop_stopped_while_the_turn_was_passed_to_it_gives_it_back_once_closed(
    engine: sa.Engine,
) -> None:
    """The turn passed to a loop's place in line while that loop was stopped (its
    callback taking the turn never runs): once the loop is closed, the next writer
    takes the turn back."""
    first, release = hold_the_turn(engine, 1)
    loop = asyncio.new_event_loop()
    queued = threading.Event()
    calls: list[asyncio.Future[Any]] = []

    async def queue_behind_the_thread() -> None:
        with store_calls_on_loop(True):
            calls.append(asyncio.ensure_future(offload(insert, engine, 2)))
            await asyncio.sleep(0)  # the loop's writer queued its ticket behind the thread
            queued.set()
            await asyncio.Event().wait()  # runs until the loop is stopped

    def run_loop() -> None:
        calls.append(loop.create_task(queue_behind_the_thread()))
        loop.run_forever()

    running = threading.Thread(target=run_loop, daemon=True)
    running.start()
    assert queued.wait(30)
    loop.call_soon_threadsafe(loop.stop)
    running.join(30)
    release.set()  # the thread passes the turn to the stopped loop's ticket
    first.join(30)
    loop.close()

    _write_in_a_thread(engine, 3)
    assert stored(engine) == [1, 3]


def test_a_write_on_the_thread_of_a_loop_closed_holding_the_turn_takes_it_back(
    engine: sa.Engine,
) -> None:
    """A blocking write on the thread of a loop whose writers hold the turn is refused
    (it would wait for good); once that loop is closed, the turn is taken back instead.
    (Thread ids are reused: a new thread can have the id of a closed loop's thread.)"""
    _close_a_loop_with_its_group_open(engine, 1)
    insert_probe(engine, 2)  # on the closed loop's thread
    assert stored(engine) == [2]
