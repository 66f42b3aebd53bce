"""Group commit for SQLite: the writes of one process that queue at the same
moment share one transaction and one commit (one fsync).

With `synchronous=FULL` every commit waits for the disk. Writers of one process
used to take turns on a lock, each with a transaction and an fsync of its own, so
128 executions resuming at once queued for as many fsyncs. Now a writer that
finds the turn taken queues; the writer holding the turn runs its work inside the
shared transaction (`BEGIN IMMEDIATE`, then its own `SAVEPOINT`) and, if others
are queued, hands the turn to the next one instead of committing. The last one
of the queue commits once for all of them. A writer that finds nobody ahead of it
begins, writes and commits at once: nothing waits for a group to fill, the group
is whatever queued while the previous transaction ran.

What each caller still sees as its own:
- its work runs on its own thread (its context variables, its exceptions);
- its failure (a typed state error, a refused statement) rolls back to its
  savepoint, so only its own work is undone, and raises only to it;
- it returns only once the commit holding its write is durable. If that commit
  fails (or SQLite rolled the whole transaction back under a later member), every
  member gets GroupFailed, with the driver's error as its cause: nothing of
  theirs was stored, so a retry is safe. A member whose own work failed waits for
  the commit too, and gets GroupFailed instead of its error when it fails: its
  error may rest on what earlier members wrote, which was then never stored.

On an event loop (a store call the runtime runs in a greenlet on the loop's
thread, `m3grpc.runtime.offload`) the same groups form without a thread per
write. Threads taking turns cost each write a wake-up and, worse, a wait for
the GIL after every statement while the loop held it: a write of a few hundred
microseconds of work took 6-9 ms at 16 rounds in flight, and a round makes four.
A loop writer runs its work at once in the loop's open transaction (its own
SAVEPOINT as above), or opens one; the group commits on a thread of its own in
the next turn of the loop, and writers that arrive meanwhile wait (without
blocking the loop) to form the next group. BEGIN is tried without waiting, and
only when another process holds the write lock does it wait, on that thread.
Loop and thread writers share the turn: the loop queues for it as one writer.

PostgreSQL needs none of this: its server groups concurrent commits itself.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy.engine import Connection, Engine, RootTransaction
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import PoolProxiedConnection

from m3grpc.storage import commit_notes
from m3grpc.storage.loop_calls import in_loop_call, suspend

# At most this many writes share a transaction: the first of them waits for all
# the others' work before its commit, and other processes wait for the whole group
# through their busy timeout.
MAX_GROUP = 32

# How often a thread waiting for the turn checks whether the event loop holding it
# (or ahead in line) was closed meanwhile (`_reclaim_from_closed_loop`).
_CLOSED_LOOP_CHECK_SECONDS = 1.0

logger = logging.getLogger(__name__)

# Set while a loop writer's work runs (in its store call's context): a write
# inside it would wait for its own group's commit.
_LOOP_WRITE_ACTIVE: ContextVar[bool] = ContextVar("m3_loop_write_active", default=False)


class BeginWouldWait(Exception):
    """BEGIN IMMEDIATE found the write lock held (by another process) and did not wait."""


class GroupFailed(Exception):
    """The shared transaction holding this write did not commit: nothing of it
    was stored. `__cause__` is the error that ended the transaction."""


@dataclass(eq=False)
class _Group:
    """One open transaction and the writes that joined it."""

    conn: Connection
    transaction: RootTransaction
    members: int = 0
    # One held lock per member waiting for the commit; the committer releases them.
    # (Not an Event: a lone write, the common case at low load, creates nothing.)
    waiting: list[threading.Lock] = field(default_factory=list)
    failure: BaseException | None = None
    # A loop group: one future per member, resolved when its commit ended (a member
    # cancelled meanwhile drops only its own); closed once no writer may join it.
    loop_waiting: list[asyncio.Future[None]] = field(default_factory=list)
    closed: bool = False
    after_commit: Callable[[Connection], None] | None = None  # a loop group's listeners


class _LoopTicket:
    """The event loop's place in the queue for the turn: one for all its writers."""

    def __init__(self, owner: GroupCommit, loop: asyncio.AbstractEventLoop) -> None:
        self._owner = owner
        self._loop = loop

    def release(self) -> None:
        # Called by the thread passing the turn on (under the owner's mutex).
        try:
            self._loop.call_soon_threadsafe(self._owner._loop_granted)
        except RuntimeError:  # the loop is closed: nobody there wants the turn
            self._owner._loop_ticket_queued = False
            writer = self._owner._pass_locked()
            if writer is not None:
                _quietly(writer.close)


_LoopState = Literal["none", "granted", "opening", "open", "committing"]


# (engine, held connection or None, wait for another process's write lock)
Begin = Callable[[Engine, PoolProxiedConnection | None, bool], tuple[Connection, RootTransaction]]


class GroupCommit:
    """The turn and the open transaction of one SQLite engine's writers."""

    def __init__(self, begin: Begin) -> None:
        # `begin` begins a write transaction (BEGIN IMMEDIATE) on the connection
        # it is given, or on one of the engine's pool when given None.
        self._begin = begin
        self._mutex = threading.Lock()
        self._held = False  # a writer holds the turn (running its work, or committing)
        # Writers waiting, in arrival order (a thread's lock, or the loop's ticket).
        self._queue: deque[threading.Lock | _LoopTicket] = deque()
        self._group: _Group | None = None  # touched only by the writer holding the turn
        # The connection of the last committed group, kept for the next one (only
        # one group is open at a time): a pool checkout and return cost more than
        # a small transaction's statements. Touched only by the writer holding the turn.
        self._writer: PoolProxiedConnection | None = None
        self._closed = False  # close() was called: the turn's last holder closes `_writer`
        self._inside = threading.local()
        # Loop writers (touched on the loop's thread only, but for `_loop_thread`):
        # the turn as the loop holds it, its open group, the writers waiting for
        # the next one.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._loop_state: _LoopState = "none"
        self._loop_group: _Group | None = None
        self._loop_waiters: list[asyncio.Future[None]] = []
        self._loop_ticket_queued = False
        self._loop_tasks: set[asyncio.Task[None]] = set()
        # The loop's group from BEGIN until its commit ended (open, then committing).
        self._loop_current: _Group | None = None
        self._committer: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Return the kept connection to the pool (before the engine is disposed):
        now if no writer holds the turn, else when the last writer queued passes it.
        (Not by queueing for the turn: a writer handing the turn on would wait
        for this caller to commit its group.)"""
        with self._mutex:
            self._closed = True
            writer = None if self._held else self._writer
            if writer is not None:
                self._writer = None
        if writer is not None:
            _quietly(writer.close)
        committer, self._committer = self._committer, None
        if committer is not None:
            committer.shutdown(wait=False)

    @property
    def waiting(self) -> int:
        """Writers queued for the turn now."""
        with self._mutex:
            return len(self._queue) + len(self._loop_waiters)

    @contextmanager
    def transaction(
        self, engine: Engine, after_commit: Callable[[Connection], None]
    ) -> Iterator[Connection]:
        """A write inside the shared transaction, durable when this returns.

        `after_commit` runs once per commit, with the committed transaction's
        connection, on the committing thread, before any member returns (for a loop
        group: on the loop's thread, its members' resumptions scheduled but not run). Errors
        of this write's own work and of BEGIN propagate unchanged; GroupFailed
        when the commit failed (see the module docstring)."""
        if in_loop_call():
            yield from self._loop_write(engine, after_commit)
            return
        if getattr(self._inside, "active", False):
            # The turn is this thread's own: waiting for it would never end.
            raise RuntimeError("a write transaction inside another on the same thread")
        if self._loop_thread == threading.get_ident() and self._loop_in_line():
            # (A loop closed since: its thread's id may be another thread's now.)
            self._reclaim_from_closed_loop()
            if self._loop_in_line():
                # Blocking the loop's thread for the turn the loop's own writers
                # hold (or queue for) would never end either.
                raise RuntimeError("a blocking write on the thread of the event loop writing")
        self._take_turn()
        try:
            group = self._group
            if group is None:
                writer, self._writer = self._writer, None
                conn, transaction = self._begin(engine, writer, True)
                group = self._group = _Group(conn, transaction)
        except BaseException:
            self._pass_turn()
            raise
        group.members += 1
        self._inside.active = True
        try:
            own_error = yield from _member(group)
        finally:
            self._inside.active = False

        ticket = self._hand_on(group) if group.failure is None else None
        if ticket is not None:
            ticket.acquire()  # released once the group's commit ended
        else:
            self._finish(group, after_commit)
        _raise_outcome(group, own_error)

    # -- writers on an event loop ----------------------------------------------------

    def _loop_write(
        self, engine: Engine, after_commit: Callable[[Connection], None]
    ) -> Generator[Connection, None, None]:
        """`transaction` for a writer in a greenlet on the event loop's thread."""
        if _LOOP_WRITE_ACTIVE.get():
            raise RuntimeError("a write transaction inside another in the same store call")
        loop = asyncio.get_running_loop()
        group = self._loop_join(engine, loop, after_commit)
        active = _LOOP_WRITE_ACTIVE.set(True)
        try:
            own_error = yield from _member(group)
        finally:
            _LOOP_WRITE_ACTIVE.reset(active)
        # A caller cancelled now has its write in the group all the same (as a
        # thread's write goes on when its awaiting caller is cancelled).
        committed: asyncio.Future[None] = loop.create_future()
        group.loop_waiting.append(committed)
        suspend(committed)
        _raise_outcome(group, own_error)

    def _loop_join(
        self,
        engine: Engine,
        loop: asyncio.AbstractEventLoop,
        after_commit: Callable[[Connection], None],
    ) -> _Group:
        """The open loop group this writer joins (one more member), waiting while
        the loop's last group commits or a thread holds the turn."""
        if self._loop is not loop:
            self._reclaim_from_closed_loop()
            if self._loop_in_line():
                raise RuntimeError("writes of one store on two event loops at once")
            self._loop, self._loop_thread = loop, threading.get_ident()
        while True:
            group = self._loop_group
            if group is not None and not group.closed and group.members < MAX_GROUP:
                group.members += 1
                return group
            if self._loop_state == "granted" or (
                self._loop_state == "none" and self._loop_take_turn(loop)
            ):
                return self._loop_open(engine, loop, after_commit)
            waiter: asyncio.Future[None] = loop.create_future()
            self._loop_waiters.append(waiter)
            try:
                suspend(waiter)
            finally:
                if not waiter.done():  # cancelled while waiting: nothing of it is written
                    with suppress(ValueError):
                        self._loop_waiters.remove(waiter)

    def _loop_take_turn(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Take the free turn for the loop; else queue the loop's ticket (once)."""
        with self._mutex:
            if not self._held:
                self._held = True
                self._loop_state = "granted"
                return True
            if not self._loop_ticket_queued:
                self._loop_ticket_queued = True
                self._queue.append(_LoopTicket(self, loop))
            return False

    def _loop_open(
        self,
        engine: Engine,
        loop: asyncio.AbstractEventLoop,
        after_commit: Callable[[Connection], None],
    ) -> _Group:
        """Begin the loop's next group (the turn is the loop's) with this writer in it."""
        self._loop_state = "opening"
        writer, self._writer = self._writer, None
        try:
            try:
                conn, transaction = self._begin(engine, writer, False)
            except BeginWouldWait:
                # Another process writes: wait for its lock on the commit thread.
                began = loop.run_in_executor(self._commit_thread(), self._begin, engine, None, True)
                try:
                    conn, transaction = suspend(asyncio.shield(began))
                except asyncio.CancelledError:
                    # BEGIN goes on, on the thread: once it ended, its transaction is
                    # given up (closing the connection rolls it back), as below.
                    suspend(asyncio.wait([began]))
                    if not began.cancelled() and began.exception() is None:
                        _quietly(began.result()[0].close)
                    raise
        except BaseException:
            if self._loop_state == "opening":  # no group: the turn goes, the others retry
                self._loop_state = "granted"
                self._loop_release_if_idle()
                self._loop_wake()
            raise
        group = _Group(conn, transaction, members=1, after_commit=after_commit)
        self._loop_group = self._loop_current = group
        self._loop_state = "open"
        # Writers waiting join it before its commit starts: their wake-ups are
        # scheduled ahead of the commit.
        self._loop_wake()
        loop.call_soon(self._loop_commit_soon, loop, group)
        return group

    def _loop_commit_soon(self, loop: asyncio.AbstractEventLoop, group: _Group) -> None:
        group.closed = True
        self._loop_group = None
        self._loop_state = "committing"
        task = loop.create_task(self._loop_commit(loop, group))
        self._loop_tasks.add(task)
        task.add_done_callback(self._loop_tasks.discard)

    async def _loop_commit(self, loop: asyncio.AbstractEventLoop, group: _Group) -> None:
        """Commit (or roll back) a loop group on the commit thread, then release it.

        Its members are resumed before `after_commit` runs: their tasks are scheduled
        first, so what a member wakes on its return (the worker an answer is for)
        runs ahead of what the commit's listeners wake (the event log's readers)."""
        committed = False
        try:
            if group.failure is None:
                try:
                    await _finished(
                        loop.run_in_executor(self._commit_thread(), group.transaction.commit)
                    )
                except BaseException as exc:
                    group.failure = exc
                    _quietly(group.transaction.rollback)
                else:
                    committed = True
            else:
                _quietly(group.transaction.rollback)
        finally:
            for waiter in group.loop_waiting:
                if not waiter.done():
                    waiter.set_result(None)
            if committed and group.after_commit is not None:
                try:
                    group.after_commit(group.conn)
                except Exception:
                    # Committed all the same: the listeners' fault is not the writes'.
                    logger.exception("a commit listener failed")
            self._keep_or_close(group)
            self._loop_current = None
            self._loop_after_group()

    def _loop_after_group(self) -> None:
        """After a loop group: its waiting writers form the next one, unless a thread
        waits for the turn (then it goes first, and the loop queues behind it)."""
        self._loop_state = "granted"
        with self._mutex:
            thread_first = bool(self._queue)
        if self._loop_waiters and not thread_first:
            self._loop_wake()
            assert self._loop is not None
            self._loop.call_soon(self._loop_release_if_idle)
        else:
            self._loop_release_if_idle()
            self._loop_wake()  # they queue the loop's ticket behind the thread

    def _loop_granted(self) -> None:
        """A thread passed the turn to the loop's ticket (called on the loop)."""
        self._loop_ticket_queued = False
        self._loop_state = "granted"
        self._loop_wake()
        assert self._loop is not None
        self._loop.call_soon(self._loop_release_if_idle)

    def _loop_release_if_idle(self) -> None:
        """Pass the loop's turn on if none of its writers opened a group with it."""
        if self._loop_state != "granted":
            return
        self._loop_state = "none"
        self._pass_turn()

    def _loop_wake(self) -> None:
        waiters, self._loop_waiters = self._loop_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _loop_in_line(self) -> bool:
        """The loop's writers hold the turn, or queue for it."""
        return self._loop_state != "none" or self._loop_ticket_queued

    def _reclaim_from_closed_loop(self) -> None:
        """Take back the turn, or the place in line, of an event loop closed before
        its writers' groups ended (closed without its remaining tasks run, or stopped
        for good): else every other writer of this store would wait for it for good.
        Its group never committed; its members never returned (nothing of theirs
        was acknowledged), so its transaction is rolled back."""
        with self._mutex:
            loop = self._loop
            if loop is None or not loop.is_closed():
                return
            queued = self._loop_ticket_queued
            tickets = [item for item in self._queue if isinstance(item, _LoopTicket)]
            # The turn is the loop's once passed to its ticket, even if the loop (stopped
            # then) never ran the callback that takes it (`_LoopTicket.release`).
            held = self._loop_state != "none" or (queued and not tickets)
            group, self._loop_current = self._loop_current, None
            for ticket in tickets:
                self._queue.remove(ticket)
            self._loop = self._loop_thread = None
            self._loop_state = "none"
            self._loop_group = None
            self._loop_waiters = []
            self._loop_ticket_queued = False
        if not (held or queued or group is not None):
            return  # the closed loop had left the turn
        logger.warning("a store's write turn was taken back from a closed event loop")
        if group is not None:
            # After a commit the commit thread may still be running on its connection.
            committer = self._committer
            if committer is None:
                _quietly(group.conn.close)
            else:
                with suppress(RuntimeError):  # shut down by close(): nothing runs there
                    committer.submit(_quietly, group.conn.close).result()
        if held:
            self._pass_turn()

    def _commit_thread(self) -> ThreadPoolExecutor:
        # One thread: one group commits at a time.
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="m3-commit")
        return self._committer

    def _take_turn(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            ticket = threading.Lock()
            ticket.acquire()
            self._queue.append(ticket)
        # Released by the writer that hands the turn over.
        while not ticket.acquire(timeout=_CLOSED_LOOP_CHECK_SECONDS):
            self._reclaim_from_closed_loop()

    def _hand_on(self, group: _Group) -> threading.Lock | None:
        """Give the turn to the next writer in line, to join `group`, if there is
        one and the group is not full, and return the ticket to wait on for the
        group's commit; None: the caller commits."""
        with self._mutex:
            if not self._queue or group.members >= MAX_GROUP:
                return None
            if isinstance(self._queue[0], _LoopTicket):
                return None  # the loop's writers form groups of their own
            ticket = threading.Lock()
            ticket.acquire()
            group.waiting.append(ticket)
            self._queue.popleft().release()
            return ticket

    def _pass_turn(self) -> None:
        with self._mutex:
            writer = self._pass_locked()
        if writer is not None:
            _quietly(writer.close)

    def _pass_locked(self) -> PoolProxiedConnection | None:
        """Hand the turn to the next in line, or free it; the caller holds the mutex.
        Returns the kept connection for the caller to close when the store is closed
        and nobody holds the turn any more."""
        if self._queue:
            self._queue.popleft().release()
            return None
        self._held = False
        if self._closed:
            writer, self._writer = self._writer, None
            return writer
        return None

    def _finish(self, group: _Group, after_commit: Callable[[Connection], None]) -> None:
        """Commit (or, once failed, roll back) `group` and release its members."""
        self._group = None
        try:
            if group.failure is None:
                try:
                    group.transaction.commit()
                except BaseException as exc:
                    group.failure = exc
                    _quietly(group.transaction.rollback)
                else:
                    after_commit(group.conn)
            else:
                _quietly(group.transaction.rollback)
        finally:
            self._keep_or_close(group)
            for ticket in group.waiting:
                ticket.release()
            self._pass_turn()

    def _keep_or_close(self, group: _Group) -> None:
        """Keep a committed group's connection for the next group; after a failure
        it goes back to the pool (or, invalidated, is discarded)."""
        if group.failure is None:
            with suppress(Exception):
                self._writer = group.conn.connection
                return
        _quietly(group.conn.close)


def _member(group: _Group) -> Generator[Connection, None, BaseException | None]:
    """One writer's work in `group`'s transaction (yields its connection); returns
    the writer's own error, if any. The first member's work runs bare (nothing else is
    in the transaction yet: a failure rolls it all back); a later one's in a
    SAVEPOINT, so that its failure undoes only its own work. A failure after which the
    transaction is over fails the whole group (`group.failure`), and it is closed."""
    first = group.members == 1
    own_error: BaseException | None = None
    try:
        if first:
            try:
                yield group.conn
            except BaseException as exc:
                own_error = exc
        else:
            # Straight to the driver: SQLAlchemy's savepoints cost more than the write.
            driver = _driver(group.conn)
            driver.execute("SAVEPOINT m3_write")
            noted_before = commit_notes.mark(group.conn)
            try:
                yield group.conn
            except BaseException as exc:
                own_error = exc
                # What it noted is undone too (the next member reuses its events' seqs).
                commit_notes.drop_after(group.conn, noted_before)
                driver.execute("ROLLBACK TO m3_write")
            driver.execute("RELEASE m3_write")
    except BaseException as exc:
        if own_error is None:
            own_error = exc  # SAVEPOINT, ROLLBACK TO or RELEASE failed
    if own_error is not None and (first or not _in_transaction(group.conn)):
        # The first write's failure ends the transaction (nothing else is in it); so
        # does one after which SQLite rolled the whole transaction back (a full disk,
        # an I/O error, a trigger's RAISE(ROLLBACK)): the earlier members' work is gone.
        group.failure = own_error
        group.closed = True
    return own_error


def _raise_outcome(group: _Group, own_error: BaseException | None) -> None:
    """After a member's group ended: GroupFailed when the shared transaction did not
    commit for another member's failure, else the member's own error, if any."""
    if group.failure is not None and group.failure is not own_error:
        raise GroupFailed("the transaction it shared did not commit") from group.failure
    if own_error is not None:
        raise own_error


async def _finished(work: asyncio.Future[None]) -> None:
    """Await `work` (on a thread); if the awaiting task is cancelled meanwhile, still
    until it ends: what to do next (commit's listeners, or rollback) depends on it."""
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        if work.done():
            raise
        await asyncio.wait([work])
        work.result()


def _driver(conn: Connection) -> DBAPIConnection:
    driver = conn.connection.dbapi_connection
    if driver is None:
        raise RuntimeError("the write transaction's connection was closed")
    return driver


def _in_transaction(conn: Connection) -> bool:
    try:
        return bool(getattr(_driver(conn), "in_transaction", False))
    except Exception:
        return False  # the connection is invalidated or closed


def _quietly(action: Callable[[], object]) -> None:
    with suppress(Exception):  # the connection is gone; the pool discards it
        action()
