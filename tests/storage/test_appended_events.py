"""The events a commit appended are handed to this process's listeners
(`add_appended_listener`, m3grpc/storage/commit_listeners.py) exactly as the log then
reads them back, so WatchPending's reader need not read them: with their
sequence numbers, and without those of a group-commit member that was rolled
back to its savepoint (the next member reuses its sequence numbers). On a real
SQLite file; the writes are made to queue behind one the test holds open."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from m3grpc.storage import EventKind, SqlExecutionStore, StoredEvent
from m3grpc.storage.engine import write_transaction
from m3grpc.storage.events import append_event, read_events
from tests.storage.conftest import ManualClock
from tests.storage.test_group_commit import Writers

# Microseconds past the second: the log keeps them, a hand-over must too.
AT = datetime(2026, 7, 28, 12, 0, 0, 123456, tzinfo=UTC)


class Refused(Exception):
    """A member's own failure, after it appended its event."""


@pytest.fixture
def store(tmp_path: Path, clock: ManualClock) -> Iterator[SqlExecutionStore]:
    store = SqlExecutionStore(tmp_path / "appended.sqlite", clock=clock)
    try:
        yield store
    finally:
        store.close()


def append(store: SqlExecutionStore, execution_id: str, *, fail: bool = False) -> None:
    with write_transaction(store.managed_input_store.engine) as conn:
        append_event(
            conn,
            EventKind.ROUND_CHANGED,
            execution_id=execution_id,
            round_id=f"round-{execution_id}",
            status="delivered",
            created_at=AT,
        )
        if fail:
            raise Refused


def test_a_commit_hands_over_what_the_log_reads_back(store: SqlExecutionStore) -> None:
    handed: list[list[StoredEvent]] = []
    store.add_appended_listener(handed.append)
    append(store, "first")
    with pytest.raises(Refused):
        append(store, "rolled-back", fail=True)  # alone in its transaction: nothing committed
    append(store, "second")
    store.remove_appended_listener(handed.append)
    append(store, "unheard")
    with store.managed_input_store.engine.connect() as reader:
        logged = read_events(reader, after_seq=0)
    assert handed == [logged[:1], logged[1:2]]
    assert [event.execution_id for event in logged] == ["first", "second", "unheard"]


def test_a_member_rolled_back_to_its_savepoint_hands_over_none_of_its_events(
    store: SqlExecutionStore,
) -> None:
    engine = store.managed_input_store.engine
    handed: list[list[StoredEvent]] = []
    store.add_appended_listener(handed.append)
    writers = Writers(engine)
    with write_transaction(engine) as conn:
        append_event(
            conn, EventKind.ROUND_PENDING, execution_id="holder", round_id="r0", created_at=AT
        )
        # Both join the holder's transaction: the first rolls back to its savepoint
        # after appending; the second's event then takes the same seq.
        writers.queue("refused", lambda: append(store, "refused", fail=True))
        writers.queue("kept", lambda: append(store, "kept"))
    outcomes = writers.join()
    assert outcomes["refused"][0] == "error" and isinstance(outcomes["refused"][1], Refused)
    assert outcomes["kept"] == ("ok", None)
    with engine.connect() as reader:
        logged = read_events(reader, after_seq=0)
    assert [event.execution_id for event in logged] == ["holder", "kept"]
    assert handed == [logged]  # one commit, the refused member's event not in it
