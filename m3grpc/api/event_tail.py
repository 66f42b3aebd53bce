"""One reader of the event log for every WatchPending stream of the process.

Each stream used to read the log itself after every commit: with N subscribers,
N reads per commit, queued on the store's threads behind the writes, so under a
burst of rounds the subscribers fell seconds behind. Here one task reads the log
once per wake-up (a commit of this process that appended events, another
replica's when heard, or the polling interval) and keeps the latest events in
memory, each with its execution's principal; streams filter that buffer without
touching the store.

A stream whose position is older than the buffer (a cursor from long ago, or a
stream that started before the reader did) reads the store itself until it
reaches the buffer. The reader runs only while a stream is open.

On SQLite the store hands over the events each commit of this process appended
(with their sequence numbers; a group-commit member rolled back to its savepoint
hands over none), on the committing thread before it schedules that commit's
wake-up (no loop callback of its own), so the woken reader finds them: they join
the buffer without a read when they follow its head with no gap and each
execution's principal is known (learnt from earlier reads of the log and from
this process's Submits). Anything else reads the log as before: a gap (another
process's events), an execution of unknown principal, a wake-up without a
hand-over, or other processes being heard (their wake-ups coincide with ours).
Over gRPC that read ran on a store thread while the answer a Respond had just
made durable was starting its delivery.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Iterator

from m3grpc.runtime import EventKind, OwnedEvent, Runtime, StoredEvent
from m3grpc.runtime.local_wakes import HUB

log = logging.getLogger(__name__)

_PAGE = 500
# Executions' principals remembered for hand-overs (an unknown one reads the log).
_PRINCIPALS = 8192


class EventTail:
    def __init__(self, runtime: Runtime, *, poll_interval: float, keep: int = 8192) -> None:
        self._runtime = runtime
        self._poll_interval = poll_interval
        self._keep = keep
        # Every event with floor < seq <= head, in order (None: not reading yet).
        self._seqs: list[int] = []
        self._events: list[OwnedEvent] = []
        self._floor: int | None = None
        self._head: int | None = None
        self._advanced: asyncio.Future[None] | None = None
        self._readers = 0
        self._task: asyncio.Task[None] | None = None
        # What commits of this process handed over, not yet in the buffer (one list
        # per commit, in seq order; appended by the committing threads, taken on the
        # loop), and every execution's principal known here.
        self._handed: deque[list[StoredEvent]] = deque()
        self._principals: OrderedDict[str, str | None] = OrderedDict()
        self._listening = False
        # Reads of the log (the start's position read not counted), and how many
        # times the buffer's advance woke the streams.
        self.log_reads = 0
        self.stream_wakes = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """While inside, the log is read: a stream holds this for its lifetime."""
        self._readers += 1
        if not self._listening:
            self._listening = True
            self._runtime.store.add_appended_listener(self._appended)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="m3-event-tail")
        try:
            yield
        finally:
            self._readers -= 1
            if self._readers == 0 and self._task is not None:
                # Nobody reads: stop, and start afresh from the log's end next time.
                self._task.cancel()
                self._task = None
                self._floor = self._head = None
                self._seqs, self._events = [], []
                # (A commit under way may still add one: its events are older than
                # the next start's head, which skips them.)
                self._handed.clear()

    def learn_principal(self, execution_id: str, principal: str | None) -> None:
        """`execution_id` belongs to `principal` (None: no principal), as stored: a
        Submit of this process says so, so the execution's events need no read."""
        self._principals[execution_id] = principal
        self._principals.move_to_end(execution_id)
        if len(self._principals) > _PRINCIPALS:
            self._principals.popitem(last=False)

    @property
    def floor(self) -> int | None:
        """Every event up to this seq was committed before the buffer began (None: not
        reading yet), so a store read started now sees all of them."""
        return self._floor

    def next_advance(self) -> asyncio.Future[None]:
        """Resolved when the buffer next gains events (take it before reading)."""
        if self._advanced is None:
            self._advanced = asyncio.get_running_loop().create_future()
        return self._advanced

    def buffered_after(
        self, after: int, *, execution_id: str | None, principal: str | None, limit: int
    ) -> tuple[list[StoredEvent], int] | None:
        """The buffered events after `after` a stream may see (at most `limit`), and
        the position they bring it to; None if the buffer does not reach back to
        `after` (then read the store)."""
        if self._floor is None or self._head is None or after < self._floor:
            return None
        start = bisect.bisect_right(self._seqs, after)
        found: list[StoredEvent] = []
        position = max(after, self._head)
        for owned in self._events[start:]:
            event = owned.event
            if execution_id is not None and event.execution_id != execution_id:
                continue
            if principal is not None and owned.principal != principal:
                continue
            found.append(event)
            if len(found) == limit:
                position = event.seq
                break
        return found, position

    def _appended(self, events: list[StoredEvent]) -> None:
        """A commit's events, on the committing thread, which schedules the commit's
        wake-up after this (the store calls this listener first): the reader woken
        finds them here. (Events the reader's start reads from the log anyway, or
        that are older than its head, it skips.)"""
        if self._readers:
            self._handed.append(events)

    def _from_handed(self) -> bool:
        """Moves what was handed over into the buffer while it follows the head; True
        if the log needs no read (everything handed over joined, nobody else writes)."""
        head = self._head
        assert head is not None
        page: list[OwnedEvent] = []
        joined = True
        while joined and self._handed:
            for event in self._handed.popleft():
                if event.seq <= head:
                    continue  # already read from the log
                if event.seq != head + 1 or event.execution_id not in self._principals:
                    joined = False  # a gap, or whose it is is unknown: read the log
                    break
                page.append(OwnedEvent(event, self._principals[event.execution_id]))
                head = event.seq
        if not joined:
            self._handed.clear()  # the log read that follows covers them
        if page:
            self._extend(page)
        # Other processes' events (PostgreSQL replicas, SQLite worker processes linked
        # to this one) are not handed over here: a wake-up from them must read the log.
        others = self._runtime.notifier.hears_other_processes or HUB.linked
        return joined and not others

    async def _run(self) -> None:
        failing = False
        while True:
            with self._runtime.events_waiter() as wake:
                try:
                    grew = await self._read()
                except asyncio.CancelledError:
                    raise
                except Exception:  # the database may be briefly unavailable
                    if not failing:
                        log.exception("reading the event log failed; retrying")
                    failing = True
                    grew = False
                else:
                    failing = False
                if grew:
                    continue  # a full page: there may be more
                await asyncio.wait({wake}, timeout=self._runtime.poll_interval(self._poll_interval))

    async def _read(self) -> bool:
        """Takes what was handed over, else reads one page after the head; True if
        the page was full."""
        if self._head is None:
            self._head = self._floor = await self._runtime.last_event_seq()
            self._wake_streams()
        if self._handed and self._from_handed():
            return False
        self.log_reads += 1
        page = await self._runtime.owned_events_after(self._head, limit=_PAGE)
        if not page:
            return False
        for owned in page:
            self.learn_principal(owned.event.execution_id, owned.principal)
        self._extend(page)
        return len(page) == _PAGE

    def _extend(self, page: list[OwnedEvent]) -> None:
        self._seqs.extend(owned.event.seq for owned in page)
        self._events.extend(page)
        self._head = page[-1].event.seq
        if len(self._events) > self._keep:
            drop = len(self._events) - self._keep
            self._floor = self._seqs[drop - 1]
            del self._seqs[:drop], self._events[:drop]
        # round_changed events are internal: a stream would only move its position
        # past them, and it does so when it next wakes for an event it sends. Those
        # commits (the delivery's start, the round's resolve) no longer wake every
        # stream ahead of the worker, which waits on the same loop to go on.
        if any(owned.event.kind is not EventKind.ROUND_CHANGED for owned in page):
            self._wake_streams()

    def _wake_streams(self) -> None:
        self.stream_wakes += 1
        advanced, self._advanced = self._advanced, None
        if advanced is not None:
            advanced.set_result(None)
