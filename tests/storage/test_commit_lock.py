"""On PostgreSQL a write transaction's events are inserted at its commit, under the
commit lock (m3grpc.storage.engine.insert_at_commit): two writers that lock the same
row never deadlock on it, and the log's order is their commit order.

Found by bench/scale.py with two replicas: the lock was taken at a transaction's
first event, after its row locks; a transaction that had appended an event waited
for a row another held, which waited for the lock. PostgreSQL aborted one of them
(hundreds a run), and a person's answer came back ABORTED.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from m3grpc.storage import EventKind, SqlExecutionStore
from m3grpc.storage.engine import write_transaction
from m3grpc.storage.events import append_event, read_events
from tests.storage.conftest import POSTGRES_URL, postgres_database

AT = datetime(2026, 1, 1, tzinfo=UTC)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(POSTGRES_URL is None, reason="M3_TEST_POSTGRES_URL not set"),
]


@pytest.fixture
def engine() -> Iterator[sa.Engine]:
    with contextmanager(postgres_database)("m3_commit_lock") as url:
        store = SqlExecutionStore(url)
        try:
            with write_transaction(store.managed_input_store.engine) as conn:
                conn.exec_driver_sql("CREATE TABLE probe (x INTEGER PRIMARY KEY, n INTEGER)")
                conn.exec_driver_sql("INSERT INTO probe VALUES (1, 0)")
            yield store.managed_input_store.engine
        finally:
            store.close()


def test_writers_that_lock_one_row_after_appending_do_not_deadlock(engine: sa.Engine) -> None:
    row_locked = threading.Event()
    appended = threading.Event()
    failures: list[BaseException] = []

    def first() -> None:
        # Locks the row, then appends once the second has appended.
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("SET LOCAL deadlock_timeout = '50ms'")
            conn.exec_driver_sql("UPDATE probe SET n = n + 1 WHERE x = 1")
            row_locked.set()
            appended.wait(timeout=30)
            time.sleep(0.3)  # the second is waiting for the row by now
            append_event(conn, EventKind.ROUND_PENDING, execution_id="first", created_at=AT)

    def second() -> None:
        # Appends, then waits for the row the first holds.
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("SET LOCAL deadlock_timeout = '50ms'")
            append_event(conn, EventKind.ROUND_PENDING, execution_id="second", created_at=AT)
            appended.set()
            row_locked.wait(timeout=30)
            conn.exec_driver_sql("UPDATE probe SET n = n + 10 WHERE x = 1")

    def run(body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:  # reported below, with its type
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(body,)) for body in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT n FROM probe").scalar_one() == 11
        # The first committed first (the second waited for its row): its event first.
        logged = read_events(conn, after_seq=0)
    assert [event.execution_id for event in logged] == ["first", "second"]
