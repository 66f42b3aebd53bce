"""WatchPending: snapshot, live events, the execution filter, and resume by
cursor after a disconnect and after a server restart on the same database.

Each test runs its own server: an unfiltered watch sees every execution.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2

from m3grpc.api import tokens
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    execution_pb2,
    execution_service_pb2,
)

from .conftest import ServerProcess, Stubs, failure, start_server

PENDING = execution_service_pb2.WATCH_EVENT_KIND_ROUND_PENDING
LEFT = execution_service_pb2.WATCH_EVENT_KIND_ROUND_LEFT_PENDING
FINISHED = execution_service_pb2.WATCH_EVENT_KIND_EXECUTION_FINISHED

Key = tuple[Any, ...]
_END = object()


def key(event: execution_service_pb2.WatchPendingResponse) -> Key:
    kind = event.WhichOneof("event")
    if kind == "round_pending":
        return ("pending", event.round_pending.round_id)
    if kind == "round_left_pending":
        left = event.round_left_pending
        return ("left", left.round_id, elicitation_pb2.ManagedInputStatus.Name(left.status))
    finished = event.execution_finished
    return (
        "finished",
        finished.execution_id,
        execution_pb2.ExecutionOutcome.Name(finished.outcome),
    )


class Watcher:
    """Reads one WatchPending stream in a thread; every wait is bounded."""

    def __init__(
        self,
        stubs: Stubs,
        *,
        execution_id: str = "",
        cursor: str = "",
        kinds: tuple[int, ...] = (),
    ) -> None:
        request = execution_service_pb2.WatchPendingRequest(
            execution_id=execution_id, cursor=cursor, kinds=kinds
        )
        self.call = stubs.executions.WatchPending(request)
        self.events: list[execution_service_pb2.WatchPendingResponse] = []
        self.error: grpc.RpcError | None = None
        self._queue: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.call:
                self._queue.put(event)
        except grpc.RpcError as error:
            self._queue.put(error)
        self._queue.put(_END)

    def take(self, count: int) -> list[Key]:
        taken = []
        for _ in range(count):
            item = self._queue.get(timeout=60)
            assert isinstance(item, execution_service_pb2.WatchPendingResponse), item
            assert item.cursor
            self.events.append(item)
            taken.append(key(item))
        return taken

    def take_until(self, wanted: Key, limit: int = 50) -> list[Key]:
        taken: list[Key] = []
        for _ in range(limit):
            taken += self.take(1)
            if taken[-1] == wanted:
                return taken
        raise AssertionError(f"{wanted} not in {taken}")

    def end(self) -> list[Key]:
        """The rest of a stream that ends by itself; its error, if any, in `error`."""
        rest: list[Key] = []
        for _ in range(1000):
            item = self._queue.get(timeout=60)
            if item is _END:
                return rest
            if isinstance(item, grpc.RpcError):
                self.error = item
                continue
            self.events.append(item)
            rest.append(key(item))
        raise AssertionError("the stream did not end")

    def close(self) -> None:
        self.call.cancel()

    @property
    def keys(self) -> list[Key]:
        return [key(event) for event in self.events]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = start_server(tmp_path)
    yield process
    process.kill()


def test_snapshot_live_filter_and_resume(server: ServerProcess) -> None:
    stubs = server.stubs()
    e1 = stubs.submit_managed()
    r1 = stubs.wait_pending(e1).round_id
    e2 = stubs.submit_managed()
    r2 = stubs.wait_pending(e2).round_id

    watch = Watcher(stubs)
    assert watch.take(2) == [("pending", r1), ("pending", r2)]  # the snapshot, oldest first
    e3 = stubs.submit_managed()
    r3 = stubs.wait_pending(e3).round_id
    assert watch.take(1) == [("pending", r3)]  # live
    stubs.respond(r1, "k1")
    assert watch.take_until(("finished", e1, "EXECUTION_OUTCOME_SUCCEEDED")) == [
        ("left", r1, "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"),
        ("finished", e1, "EXECUTION_OUTCOME_SUCCEEDED"),
    ]

    # The snapshot events carry typed rounds with their position.
    first = watch.events[0].round_pending
    assert (first.execution_id, first.round_index, first.round_limit) == (e1, 0, 8)

    # Resume after a disconnect, from inside the snapshot and from a live event.
    watch.close()
    from_snapshot = Watcher(stubs, cursor=watch.events[0].cursor)
    assert from_snapshot.take(len(watch.keys) - 1) == watch.keys[1:]
    from_snapshot.close()
    from_live = Watcher(stubs, cursor=watch.events[2].cursor)
    assert from_live.take(len(watch.keys) - 3) == watch.keys[3:]
    from_live.close()

    # With an execution filter the stream ends after that execution finishes.
    only_e2 = Watcher(stubs, execution_id=e2)
    assert only_e2.take(1) == [("pending", r2)]
    stubs.respond(r2, "k2")
    assert only_e2.end() == [
        ("left", r2, "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"),
        ("finished", e2, "EXECUTION_OUTCOME_SUCCEEDED"),
    ]
    assert only_e2.error is None
    # ... and at once for an execution that finished before the stream started.
    assert Watcher(stubs, execution_id=e1).end() == []
    # A filtered stream's cursor resumes only with the same filter.
    mismatch = Watcher(stubs, cursor=only_e2.events[0].cursor)
    assert mismatch.end() == []
    assert mismatch.error is not None
    assert failure(mismatch.error).info.reason == "MANAGED_INPUT_INVALID"
    stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=e3))
    stubs.close()


def test_resume_across_a_restart(server: ServerProcess) -> None:
    stubs = server.stubs()
    e1 = stubs.submit_managed()
    r1 = stubs.wait_pending(e1).round_id
    watch = Watcher(stubs)
    assert watch.take(1) == [("pending", r1)]
    e2 = stubs.submit_managed()
    r2 = stubs.wait_pending(e2).round_id
    assert watch.take(1) == [("pending", r2)]

    # SIGTERM: open streams end UNAVAILABLE (resumable); pending executions are
    # stopped (FAILED, `worker_shutdown`) after the grace period, which appends
    # events while no one watches.
    assert server.terminate() == 0
    watch.end()
    assert watch.error is not None
    gone = failure(watch.error)
    assert gone.code == grpc.StatusCode.UNAVAILABLE
    assert gone.info.reason == "SERVICE_SHUTTING_DOWN"
    stubs.close()

    server.start()
    stubs = server.stubs()
    resumed = Watcher(stubs, cursor=watch.events[-1].cursor)
    shutdown_events = resumed.take(4)
    assert sorted(shutdown_events) == sorted(
        [
            ("left", r1, "MANAGED_INPUT_STATUS_FAILED"),
            ("finished", e1, "EXECUTION_OUTCOME_FAILED"),
            ("left", r2, "MANAGED_INPUT_STATUS_FAILED"),
            ("finished", e2, "EXECUTION_OUTCOME_FAILED"),
        ]
    )
    assert shutdown_events.index(
        ("left", r1, "MANAGED_INPUT_STATUS_FAILED")
    ) < shutdown_events.index(("finished", e1, "EXECUTION_OUTCOME_FAILED"))
    finished = [e for e in resumed.events if e.WhichOneof("event") == "execution_finished"]
    assert all(e.execution_finished.failure_code == "worker_shutdown" for e in finished)
    e3 = stubs.submit_managed()
    r3 = stubs.wait_pending(e3).round_id
    assert resumed.take(1) == [("pending", r3)]
    resumed.close()

    # The whole history from the first cursor: nothing lost, nothing twice.
    replay = Watcher(stubs, cursor=watch.events[0].cursor)
    history = watch.keys[1:] + resumed.keys
    assert replay.take(len(history)) == history
    replay.close()
    # A fresh stream's snapshot holds only what is pending now.
    fresh = Watcher(stubs)
    assert fresh.take(1) == [("pending", r3)]
    fresh.close()
    stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=e3))
    stubs.close()


def test_kinds_send_only_the_events_asked_for(server: ServerProcess) -> None:
    stubs = server.stubs()
    e1 = stubs.submit_managed()
    r1 = stubs.wait_pending(e1).round_id

    new_rounds = Watcher(stubs, kinds=(PENDING,))
    assert new_rounds.take(1) == [("pending", r1)]  # the snapshot is round_pending
    outcomes = Watcher(stubs, kinds=(LEFT, FINISHED, LEFT))  # repeats are ignored
    finishes = Watcher(stubs, kinds=(FINISHED,))
    stubs.respond(r1, "k1")
    # e1 finished before e2 starts: the log's order below is then e1's events, r2's.
    assert stubs.result(e1).outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    e2 = stubs.submit_managed()
    r2 = stubs.wait_pending(e2).round_id

    # Neither of e1's later events reached the first stream before r2's round.
    assert new_rounds.take(1) == [("pending", r2)]
    # No snapshot without ROUND_PENDING, and no round_pending live either.
    assert outcomes.take(2) == [
        ("left", r1, "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"),
        ("finished", e1, "EXECUTION_OUTCOME_SUCCEEDED"),
    ]
    assert finishes.take(1) == [("finished", e1, "EXECUTION_OUTCOME_SUCCEEDED")]

    # A cursor is a position in the log: every kind, resumed from the first
    # stream's snapshot event, gets what that stream skipped after it.
    everything = Watcher(stubs, cursor=new_rounds.events[0].cursor)
    assert everything.take(3) == [
        ("left", r1, "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"),
        ("finished", e1, "EXECUTION_OUTCOME_SUCCEEDED"),
        ("pending", r2),
    ]
    # ... and the same kinds again resume with nothing sent twice.
    again = Watcher(stubs, cursor=new_rounds.events[0].cursor, kinds=(PENDING,))
    assert again.take(1) == [("pending", r2)]

    # An execution's stream still ends after it finishes, finish not asked for.
    only_e2 = Watcher(stubs, execution_id=e2, kinds=(PENDING,))
    assert only_e2.take(1) == [("pending", r2)]
    stubs.respond(r2, "k2")
    assert only_e2.end() == []
    assert only_e2.error is None
    for watcher in (new_rounds, outcomes, finishes, everything, again):
        watcher.close()
    stubs.close()


@pytest.mark.parametrize(
    ("kinds", "violation"),
    [
        ((execution_service_pb2.WATCH_EVENT_KIND_UNSPECIFIED,), ("kinds[0]", "must be set")),
        ((PENDING, 99), ("kinds[1]", "unknown enum value 99")),
        ((PENDING,) * 17, ("kinds", "must have at most 16 entries (17)")),
    ],
)
def test_an_unknown_kind_or_too_many_are_invalid_argument(
    server: ServerProcess, kinds: tuple[int, ...], violation: tuple[str, str]
) -> None:
    stubs = server.stubs()
    violations = _refused(Watcher(stubs, kinds=kinds), "MODEL_VALIDATION_FAILED")
    assert [(v.field, v.description) for v in violations] == [violation]
    stubs.close()


def _refused(rejected: Watcher, reason: str) -> list[Any]:
    """The field violations of a stream refused INVALID_ARGUMENT with `reason`."""
    assert rejected.end() == []
    assert rejected.error is not None
    bad = failure(rejected.error)
    assert bad.code == grpc.StatusCode.INVALID_ARGUMENT
    assert bad.info.reason == reason
    return list(bad.detail(error_details_pb2.BadRequest).field_violations)


def test_a_cursor_past_the_end_of_the_log_is_invalid_argument(server: ServerProcess) -> None:
    # A cursor another database issued (a fresh one, an older backup) would skip every
    # event until this log caught up with it: refused, never a silent stream.
    stubs = server.stubs()
    execution_id = stubs.submit_managed()
    stubs.wait_pending(execution_id)
    watch = Watcher(stubs)
    assert watch.take(1)[0][0] == "pending"
    cursor = watch.events[-1].cursor
    watch.close()
    ahead = tokens.cursor_token(tokens.Cursor(seq=tokens.read_cursor(cursor, "").seq + 1000))
    violations = _refused(Watcher(stubs, cursor=ahead), "MANAGED_INPUT_INVALID")
    assert [v.field for v in violations] == ["cursor"]
    # The cursor it handed out still resumes.
    resumed = Watcher(stubs, cursor=cursor)
    e2 = stubs.submit_managed()
    r2 = stubs.wait_pending(e2).round_id
    assert ("pending", r2) in resumed.take(1)
    resumed.close()
    for done in (execution_id, e2):
        stubs.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=done))
    stubs.close()
