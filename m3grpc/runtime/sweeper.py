"""The sweeper: carries out what is overdue, on whichever replica notices first.

Two clocks run out on a round without anyone writing to it (m3grpc.storage.overdue):
a worker's lease (its process died) and the deadline of a released round (no
worker holds it: handed over at a graceful shutdown, and no replica has a free
slot to claim it). Every read reports such a round as the failure that is due
at once; the sweeper makes it so, and finishes its execution, so that Result,
Snapshot and WatchPending's events follow:

- expired leases: recovery (m3grpc.runtime.recovery): a resumable round is
  released for the next worker, anything else fails closed;
- released rounds past their deadline: the store's `expire_released` does in one
  transaction what a worker claiming it would do (claim, fail the round
  `operation_timeout`, finish the execution).

A held round's deadline is its worker's to enforce; the sweeper leaves it alone
(if that worker is gone, its lease runs out and recovery takes the round).

Every process that runs a Runtime sweeps, with or without worker slots. Each
write is a compare-and-set on what it read (an expired lease, a round still
released and pending), so a lease renewed, a round claimed or answered, or
another replica's sweep that came first means nothing is written: replicas
never fight each other or a live worker, and this process spares the
executions its own workers run even if a stalled loop let their leases lapse.
A pass runs at start, then at the next deadline or lease expiry the database
knows of (so within moments of it, not an interval later), at most `interval`
after the last pass and never sooner than MIN_GAP after it, and when woken
(another replica released an execution).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from m3grpc.errors import ManagedInputConflict, ManagedInputRecoveryError, ManagedInputStateError
from m3grpc.runtime.lifecycle import Lifecycle
from m3grpc.runtime.notifier import Notifier
from m3grpc.runtime.offload import offload
from m3grpc.runtime.recovery import recover_expired
from m3grpc.storage import SqlExecutionStore
from m3grpc.storage.transitions import DEADLINE_FAILURE_CODE

log = logging.getLogger(__name__)

# Passes never come closer than this, however many deadlines fall together.
MIN_GAP = 0.2
# The longest between passes when nothing is known to be due (the default
# `interval`: the lease duration, capped at this).
MAX_INTERVAL = 10.0


@dataclass(frozen=True)
class Swept:
    """What one pass did, and when the next is due."""

    # Executions it finished (recovered, or expired at a released round's deadline).
    finished: list[str] = field(default_factory=list)
    # Executions it released for another worker (recovery of a resumable round).
    released: list[str] = field(default_factory=list)
    # The next deadline or lease expiry after the pass began; None: nothing known.
    due: datetime | None = None


class Sweeper:
    def __init__(
        self,
        store: SqlExecutionStore,
        notifier: Notifier,
        lifecycle: Lifecycle,
        *,
        live: Callable[[], Collection[str]],
        on_released: Callable[[], None],
        lease_duration: timedelta,
        interval: float | None = None,
    ) -> None:
        """`live`: the executions this process's workers run now (read on the
        loop); `on_released`: called when a pass released work to claim."""
        self.owner_id = f"sweeper-{uuid.uuid4().hex[:12]}"
        self._store = store
        self._notifier = notifier
        self._lifecycle = lifecycle
        self._live = live
        self._on_released = on_released
        self._lease_duration = lease_duration
        self._interval = interval or min(lease_duration.total_seconds(), MAX_INTERVAL)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        # Passes run so far (for tests and metrics).
        self.passes = 0

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """One pass now (work a dead predecessor left), then the loop."""
        self._wake = asyncio.Event()
        delay = self._after(await self._pass())
        self._task = asyncio.create_task(self._loop(delay), name="m3-sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def wake(self) -> None:
        """Something may be due sooner than the pass the sweeper waits for."""
        if self._wake is not None:
            self._wake.set()

    def sweep(self, live: Collection[str] = ()) -> Swept:
        """One pass (blocking: call it off the loop). `live`: executions to spare."""
        now = self._store.now()
        released: list[str] = []
        finished = recover_expired(self._store, live, released, self._lifecycle)
        for execution_id in self._store.released_past_deadline():
            try:
                expired = self._store.expire_released(
                    execution_id, owner_id=self.owner_id, lease_duration=self._lease_duration
                )
            except (ManagedInputConflict, ManagedInputStateError, ManagedInputRecoveryError):
                continue  # it moved meanwhile: claimed, answered, cancelled
            if expired is None:
                continue
            round_id, result = expired
            self._lifecycle.round_failed(
                execution_id, round_id, DEADLINE_FAILURE_CODE, answered=False
            )
            self._lifecycle.execution_finished(
                execution_id, result.outcome.value, result.failure_code
            )
            finished.append(execution_id)
        return Swept(finished, released, self._store.next_due(now))

    async def _pass(self) -> Swept:
        # Read on the loop, where the pool changes it.
        swept = await offload(self.sweep, frozenset(self._live()))
        self.passes += 1
        return swept

    def _after(self, swept: Swept) -> float:
        """Wake what the pass changed; the seconds until the next pass."""
        for execution_id in swept.finished + swept.released:
            self._notifier.notify(execution_id)
        if swept.released:
            self._on_released()  # claim them now
        if swept.due is None:
            return self._interval
        until = (swept.due - self._store.now()).total_seconds()
        return min(max(until, 0.0), self._interval)

    async def _loop(self, delay: float) -> None:
        assert self._wake is not None
        while True:
            started = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(delay, MIN_GAP))
            self._wake.clear()
            # However it was woken, passes keep their distance.
            await asyncio.sleep(max(0.0, MIN_GAP - (time.monotonic() - started)))
            try:
                delay = self._after(await self._pass())
            except Exception:  # M3Error, or the database briefly unavailable
                log.exception("sweeping overdue rounds failed; retrying")
                delay = self._interval
