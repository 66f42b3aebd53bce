"""WatchPending: a snapshot of the pending rounds, then live events from the
store's append-only event log, resumable by cursor across server restarts.

Positions are event sequence numbers. A stream without a cursor reads the
last sequence number S first, then sends the rounds that were pending at S
(each with a cursor "inside the snapshot at S, after this round") and then
every event after S. The snapshot at S is rebuilt exactly from the current
state and the events after S: a round was pending at S if it is pending now
or left pending after S, unless it became pending after S (then its live
`round_pending` event sends it). So nothing is lost or sent twice, and a
snapshot cursor resumes the rest of the same snapshot, even after a restart.

`round_changed` events are internal: they are not sent but move the position.
Live events come from the process's one reader of the log (`event_tail`),
which wakes on every write this process commits that appends events, and on
PostgreSQL on every such write other replicas commit (LISTEN/NOTIFY), and
polls the log as a fallback (the stream's own lifetime bounds the loop). The
records that round_pending and execution_finished events announce are read
once for every stream, unless this process committed them a moment ago.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from m3grpc.api.event_tail import EventTail
from m3grpc.api.tokens import Cursor, Keyset, cursor_token, read_cursor, require_reached
from m3grpc.runtime import EventKind, Runtime, StoredEvent
from m3grpc.types import ExecutionState, ExecutionStatus, ManagedInputRecord, ManagedInputStatus
from m3grpc.wire import events
from m3grpc.wire.gen.m3.v1 import elicitation_pb2, execution_service_pb2
from m3grpc.wire.messages import pending_round_message

_PAGE = 500
# Pending rounds a stream's opening snapshot reads at a time (and holds at most), and
# the pages read lately, which streams starting together share.
_SNAPSHOT_PAGE = 100
_SNAPSHOT_PAGES = 8
# Pending rounds and finished executions recently sent, shared by every stream.
_RECENT = 4096
# Round records read for those messages: a round's message is built once per stream
# filter, all streams of a filter then take it from `messages`, so a record is wanted
# only while the streams reach its event; a whole record per round (~6 KB) held for
# 4,096 rounds was memory with 1,000 executions paused. A later reader reads it again.
_RECENT_ROUNDS = 256
WatchEvent = execution_service_pb2.WatchPendingResponse
K = TypeVar("K")
V = TypeVar("V")


class ServiceShuttingDown(Exception):
    """The server is stopping: the stream ends so the client can resume elsewhere."""


class PendingWatch:
    def __init__(
        self,
        runtime: Runtime,
        *,
        poll_interval: float,
        shutdown: asyncio.Event,
        buffered_events: int = 8192,
    ) -> None:
        """`buffered_events`: how many of the latest events the shared reader keeps."""
        self._runtime = runtime
        self._poll_interval = poll_interval
        # Open WatchPending streams of this process (a metrics gauge).
        self.active = 0
        tail = EventTail(runtime, poll_interval=poll_interval, keep=buffered_events)
        self._shared = _Shared(tail, shutdown)

    @property
    def log_reads(self) -> int:
        """How many times the shared reader has read the event log."""
        return self._shared.tail.log_reads

    @property
    def stream_wakes(self) -> int:
        """How many times the shared reader's buffer advance woke the streams."""
        return self._shared.tail.stream_wakes

    def learn_principal(self, execution_id: str, principal: str | None) -> None:
        """A Submit of this process stored `execution_id` for `principal`: the shared
        reader then takes the execution's events as committed, without a read."""
        self._shared.tail.learn_principal(execution_id, principal)

    async def stream(
        self,
        execution_id: str,
        token: str,
        principal: str | None = None,
        kinds: frozenset[str] | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """`principal`: only that principal's executions (None: every execution).
        `kinds`: only events of these kinds, by `EventKind` value (None: every kind)."""
        self.active += 1
        try:
            stream = _Stream(self._runtime, self._poll_interval, principal, self._shared, kinds)
            async for event in stream.run(execution_id, token):
                yield event
        finally:
            self.active -= 1


class RecentReads(Generic[K, V]):
    """Values that never change once read (a round's `round_pending` message, a
    finished execution's state), by key, the latest `size` kept.

    Every stream that reaches the same event sends the same message, so N
    subscribers read it once, not N times, even when they reach it at the same
    moment (they await the one read). Events are filtered per principal first, so
    a stream only looks up what it may see."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._reads: OrderedDict[K, asyncio.Future[V]] = OrderedDict()

    async def get(self, key: K, read: Callable[[], Awaitable[V]]) -> V:
        found = self._reads.get(key)
        if found is None:
            found = asyncio.ensure_future(read())
            self._reads[key] = found
            if len(self._reads) > self._size:
                self._reads.popitem(last=False)
        try:
            # shield: one stream going away does not cancel the read the others await.
            return await asyncio.shield(found)
        except Exception:
            if self._reads.get(key) is found:
                del self._reads[key]  # a failed read is not remembered
            raise


@dataclass(frozen=True)
class SnapshotPage:
    """Rounds pending when the page was read, with their messages (built once), and
    the log's position read just before: every event up to it committed earlier."""

    floor: int
    records: list[ManagedInputRecord]
    messages: list[elicitation_pb2.PendingElicitationRound]


# (principal, execution filter, the keyset after which the page starts)
PageKey = tuple[str | None, str | None, Keyset | None]


class SnapshotPages:
    """The pages of pending rounds read lately for streams' opening snapshots, shared:
    streams that start at about the same time (a service restarting, an inbox's
    browsers) read each page once, and each message is built once, not once per
    stream. A page read before a stream's position (`floor` behind it) may lack
    rounds that became pending by then: that stream reads the page afresh, which
    replaces it for the streams after it."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._pages: OrderedDict[PageKey, asyncio.Future[SnapshotPage]] = OrderedDict()

    async def get(
        self, key: PageKey, position: int, read: Callable[[], Awaitable[SnapshotPage]]
    ) -> SnapshotPage:
        found = self._pages.get(key)
        if found is not None:
            with contextlib.suppress(Exception):  # a failed read: read it again below
                page = await asyncio.shield(found)
                if page.floor >= position:
                    return page
        fresh = asyncio.ensure_future(read())
        self._pages[key] = fresh
        self._pages.move_to_end(key)
        while len(self._pages) > self._size:
            self._pages.popitem(last=False)
        try:
            # shield: one stream going away does not cancel the read the others await.
            return await asyncio.shield(fresh)
        except Exception:
            if self._pages.get(key) is fresh:
                del self._pages[key]
            raise


class _Shared:
    """What every stream of the process shares: the log's reader and the caches."""

    def __init__(self, tail: EventTail, shutdown: asyncio.Event) -> None:
        self.tail = tail
        self.shutdown = shutdown  # set when the service stops
        self.rounds: RecentReads[str, ManagedInputRecord] = RecentReads(_RECENT_ROUNDS)
        self.finished: RecentReads[str, ExecutionState] = RecentReads(_RECENT)
        # A live event's message by (seq, the stream's execution filter): the same
        # for every stream with that filter, so built once, not once per stream.
        self.messages: RecentReads[tuple[int, str], WatchEvent | None] = RecentReads(_RECENT)
        self.pages = SnapshotPages(_SNAPSHOT_PAGES)
        self._shutdown_wait: asyncio.Task[Any] | None = None

    def shutdown_wait(self) -> asyncio.Future[Any]:
        """Done once `shutdown` is set: one waiting task for every stream (made on
        first use, on the running loop)."""
        wait = self._shutdown_wait
        if wait is None or (wait.done() and not self.shutdown.is_set()):
            wait = self._shutdown_wait = asyncio.ensure_future(self.shutdown.wait())
        return wait


class _Stream:
    """One WatchPending stream: what it reads is limited to `principal`'s executions."""

    def __init__(
        self,
        runtime: Runtime,
        poll_interval: float,
        principal: str | None,
        shared: _Shared,
        kinds: frozenset[str] | None = None,
    ) -> None:
        self._runtime = runtime
        self._poll_interval = poll_interval
        self._principal = principal
        self._shared = shared
        # The kinds this stream sends; the internal round_changed never. A skipped
        # event costs no read, no message and no write: a subscriber that only wants
        # new rounds (an inbox, a benchmark) pays for a third of the messages.
        self._sends = _SENDABLE if kinds is None else kinds

    async def run(self, execution_id: str, token: str) -> AsyncIterator[WatchEvent]:
        if execution_id:
            # EXECUTION_NOT_FOUND up front, also for another principal's execution.
            await self._runtime.require_visible_execution(execution_id, self._principal)
        if token:
            cursor = read_cursor(token, execution_id)
            require_reached(cursor, await self._runtime.last_event_seq())
            in_snapshot = cursor.snapshot_after is not None
        else:
            cursor = Cursor(seq=await self._runtime.last_event_seq(), execution_id=execution_id)
            in_snapshot = True
        if in_snapshot and EventKind.ROUND_PENDING in self._sends:
            async for record, message in self._snapshot(cursor):
                yield self._snapshot_event(cursor, record, message)
        async for event in self._live(cursor.seq, execution_id):
            yield event

    # -- snapshot ---------------------------------------------------------------------

    async def _snapshot(
        self, cursor: Cursor
    ) -> AsyncIterator[tuple[ManagedInputRecord, elicitation_pb2.PendingElicitationRound]]:
        """The rounds pending at `cursor.seq` after `cursor.snapshot_after`, oldest first,
        read from the store a page at a time as the stream sends them: a stream holds
        one page, however many rounds are pending.

        A page is the rounds pending now (when it is read). Each round that changed since
        the snapshot's position has an event, committed before the log is read after
        the page: one that became pending since is not in the snapshot (its live
        `round_pending` sends it), and one that left pending since is merged in at its
        place unless a page read it pending (it left after that read)."""
        execution_id = cursor.execution_id or None
        after = cursor.snapshot_after
        upto = cursor.seq
        became: set[str] = set()
        # Rounds pending at the position that left pending since, not sent yet: by keyset.
        left: list[tuple[Keyset, str]] = []
        while True:
            page = await self._shared.pages.get(
                (self._principal, execution_id, after),
                cursor.seq,
                functools.partial(self._read_page, execution_id, after),
            )
            # Every change visible in `page` has an event <= read: both committed before.
            read = await self._runtime.last_event_seq()
            now_pending, now_left = await self._changes(upto, read, execution_id)
            upto = read
            became |= now_pending
            # One in this page (it left after the read) is sent with it, as is one
            # before it (it was in an earlier page, or before the cursor).
            for round_id in sorted(now_left - became - {r.round_id for r in page.records}):
                record = await self._runtime.get_round(round_id)
                if after is None or _keyset(record) > after:
                    heapq.heappush(left, (_keyset(record), round_id))
            for record, message in zip(page.records, page.messages, strict=True):
                key = _keyset(record)
                while left and left[0][0] < key:
                    yield await self._left_round(heapq.heappop(left)[1])
                if record.round_id not in became:
                    yield record, message
                after = key
            if len(page.records) < _SNAPSHOT_PAGE:
                break
        while left:
            yield await self._left_round(heapq.heappop(left)[1])

    async def _read_page(self, execution_id: str | None, after: Keyset | None) -> SnapshotPage:
        floor = await self._runtime.last_event_seq()
        records = await self._runtime.list_rounds(
            execution_id=execution_id,
            statuses=[ManagedInputStatus.PENDING],
            after=after,
            limit=_SNAPSHOT_PAGE,
            principal=self._principal,
        )
        return SnapshotPage(floor, records, [pending_round_message(r) for r in records])

    async def _left_round(
        self, round_id: str
    ) -> tuple[ManagedInputRecord, elicitation_pb2.PendingElicitationRound]:
        record = await self._runtime.get_round(round_id)
        return record, pending_round_message(record)

    async def _changes(
        self, after: int, upto: int, execution_id: str | None
    ) -> tuple[set[str], set[str]]:
        """Rounds that became pending, and rounds that left pending, in (after, upto]."""
        became: set[str] = set()
        left: set[str] = set()
        while after < upto:
            batch = await self._runtime.events_after(
                after, execution_id=execution_id, principal=self._principal, limit=_PAGE
            )
            for event in batch:
                if event.seq > upto or event.round_id is None:
                    continue
                if event.kind is EventKind.ROUND_PENDING:
                    became.add(event.round_id)
                elif event.kind is EventKind.ROUND_LEFT_PENDING:
                    left.add(event.round_id)
            if not batch:
                break
            after = batch[-1].seq
        return became, left

    @staticmethod
    def _snapshot_event(
        cursor: Cursor,
        record: ManagedInputRecord,
        message: elicitation_pb2.PendingElicitationRound,
    ) -> WatchEvent:
        position = Cursor(cursor.seq, cursor.execution_id, _keyset(record))
        return WatchEvent(cursor=cursor_token(position), round_pending=message)

    # -- live ---------------------------------------------------------------------------

    async def _live(self, after: int, execution_id: str) -> AsyncIterator[WatchEvent]:
        # Read the state before the events: a finish committed before this read is
        # in the store after the cursor, so ending the stream once those events are
        # read loses nothing. Such a stream reads the store, not the shared buffer,
        # which may not have reached the finish yet.
        finished = execution_id != "" and await self._finished(execution_id)
        with self._shared.tail.reading():
            while True:
                # Taken before the reads: an advance after them wakes the wait below.
                wake = self._shared.tail.next_advance()
                batch, position = await self._read(after, execution_id, from_store=finished)
                for event in batch:
                    if event.kind not in self._sends:
                        message = None  # internal or not asked for: only the position moves
                    elif event.kind is EventKind.ROUND_LEFT_PENDING:
                        message = self._left_pending(event, Cursor(event.seq, execution_id))
                    else:  # built from a read, once for every stream with this filter
                        message = await self._shared.messages.get(
                            (event.seq, execution_id),
                            functools.partial(
                                self._message, event, Cursor(event.seq, execution_id)
                            ),
                        )
                    if message is not None:
                        yield message
                    if execution_id and event.kind is EventKind.EXECUTION_FINISHED:
                        return
                after = position
                if batch:
                    continue
                if finished:
                    return  # it finished at or before the cursor
                await self._idle(wake)

    async def _read(
        self, after: int, execution_id: str, *, from_store: bool
    ) -> tuple[list[StoredEvent], int]:
        """The events after `after` this stream may see, and the position they bring
        it to: from the shared buffer when it reaches back that far, else the store."""
        tail = self._shared.tail
        if not from_store:
            buffered = tail.buffered_after(
                after, execution_id=execution_id or None, principal=self._principal, limit=_PAGE
            )
            if buffered is not None:
                return buffered
        # Every event up to the buffer's floor committed before this read began.
        known = tail.floor or 0
        batch = await self._runtime.events_after(
            after, execution_id=execution_id or None, principal=self._principal, limit=_PAGE
        )
        if len(batch) == _PAGE:
            return batch, batch[-1].seq
        return batch, max(after, known, *(event.seq for event in batch[-1:]))

    async def _finished(self, execution_id: str) -> bool:
        state = await self._runtime.snapshot(execution_id)
        return state.lifecycle is ExecutionStatus.FINISHED

    async def _idle(self, wake: asyncio.Future[None]) -> None:
        if self._shared.shutdown.is_set():
            raise ServiceShuttingDown
        # One task per process waits for the shutdown; a stream's idle wait only
        # watches its future (no task of its own, every time it goes idle).
        waits: set[asyncio.Future[Any]] = {wake, self._shared.shutdown_wait()}
        await asyncio.wait(
            waits,
            timeout=self._runtime.poll_interval(self._poll_interval),
            return_when=asyncio.FIRST_COMPLETED,
        )
        if self._shared.shutdown.is_set():
            raise ServiceShuttingDown

    @staticmethod
    def _left_pending(event: StoredEvent, position: Cursor) -> WatchEvent | None:
        if event.round_id is None:
            return None
        return events.round_left_pending_message(
            cursor_token(position), event.round_id, event.execution_id, event.status
        )

    async def _message(self, event: StoredEvent, position: Cursor) -> WatchEvent | None:
        token = cursor_token(position)
        # Stored or finished by this process a moment ago: what it committed is
        # handed over (waited for if its store call is still returning), else
        # (another replica's, or long ago) it is read once for all streams.
        if event.kind is EventKind.ROUND_PENDING and event.round_id is not None:
            round_id = event.round_id
            record = await self._runtime.stored_round(round_id)
            if record is None:
                record = await self._shared.rounds.get(
                    round_id, lambda: self._runtime.get_round(round_id)
                )
            return events.round_pending_message(token, record)
        if event.kind is EventKind.EXECUTION_FINISHED:
            finished_id = event.execution_id
            state = await self._runtime.finished_state(finished_id)
            if state is None:
                state = await self._shared.finished.get(
                    finished_id, lambda: self._runtime.snapshot(finished_id)
                )
            return events.execution_finished_message(token, state)
        return None  # round_changed: internal


# The kinds a stream may send (round_changed is internal).
_SENDABLE: frozenset[str] = frozenset(
    {EventKind.ROUND_PENDING, EventKind.ROUND_LEFT_PENDING, EventKind.EXECUTION_FINISHED}
)


def _keyset(record: ManagedInputRecord) -> Keyset:
    return record.pending.created_at, record.round_id
