"""A worker's store write rides out lock contention (runtime/outage.stored): the transaction
was rolled back whole, so it is run again, as it is through a database outage.

Found under load on PostgreSQL (bench/scale.py): a delivery start picked as a deadlock
victim failed its execution `managed_input_conflict`, losing an answer a person gave.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from m3grpc.errors import TransactionConflict
from m3grpc.runtime.outage import stored
from m3grpc.storage.engine import write_transaction
from m3grpc.storage.store_engine import create_store_engine
from tests.storage.conftest import POSTGRES_URL, postgres_database


def insert(engine: sa.Engine, value: int) -> None:
    with write_transaction(engine) as conn:
        conn.exec_driver_sql(f"INSERT INTO probe VALUES ({value})")


def values(engine: sa.Engine) -> list[int]:
    with engine.connect() as conn:
        return [row[0] for row in conn.exec_driver_sql("SELECT x FROM probe ORDER BY x")]


def test_a_write_that_meets_a_held_lock_is_run_again(tmp_path: Path) -> None:
    engine = create_store_engine(tmp_path / "m3.sqlite", busy_timeout_ms=50)
    try:
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("CREATE TABLE probe (x INTEGER)")
        holder = sqlite3.connect(
            tmp_path / "m3.sqlite", isolation_level=None, check_same_thread=False
        )
        holder.execute("BEGIN EXCLUSIVE")
        # Without the retry the write fails at its busy timeout.
        with pytest.raises(TransactionConflict):
            insert(engine, 0)
        release = threading.Timer(0.5, holder.execute, args=("ROLLBACK",))
        release.start()
        try:
            asyncio.run(stored(insert, engine, 1))
        finally:
            release.join()
            holder.close()
        assert values(engine) == [1]
    finally:
        engine.dispose()


@pytest.fixture
def postgres_engine() -> Iterator[sa.Engine]:
    if POSTGRES_URL is None:
        pytest.skip("M3_TEST_POSTGRES_URL not set")
    with contextmanager(postgres_database)("m3_outage") as url:
        engine = create_store_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


@pytest.mark.postgres
def test_a_deadlock_victim_is_run_again(postgres_engine: sa.Engine) -> None:
    """Two transactions lock rows 1 and 2 in opposite orders; PostgreSQL aborts the one
    whose deadlock check runs first (this test's write, with a short deadlock_timeout),
    and the retry commits once the other is done."""
    engine = postgres_engine
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("CREATE TABLE probe (x INTEGER PRIMARY KEY, n INTEGER)")
        conn.exec_driver_sql("INSERT INTO probe VALUES (1, 0), (2, 0)")
    other = engine.connect()
    other_tx = other.begin()
    other.exec_driver_sql("UPDATE probe SET n = n + 1 WHERE x = 2")
    attempts = 0
    locked_first = threading.Event()

    def crossed() -> None:
        nonlocal attempts
        attempts += 1
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("SET LOCAL deadlock_timeout = '20ms'")
            conn.exec_driver_sql("UPDATE probe SET n = n + 10 WHERE x = 1")
            locked_first.set()
            conn.exec_driver_sql("UPDATE probe SET n = n + 10 WHERE x = 2")

    def finish_other() -> None:
        locked_first.wait(timeout=30)
        # Waits on row 1 until the crossed write is aborted, then commits.
        other.exec_driver_sql("UPDATE probe SET n = n + 1 WHERE x = 1")
        other_tx.commit()

    finisher = threading.Thread(target=finish_other)
    finisher.start()
    try:
        asyncio.run(stored(crossed))
    finally:
        finisher.join(timeout=60)
        other.close()
    assert attempts >= 2  # the first was the deadlock's victim
    with engine.connect() as conn:
        rows = dict(conn.exec_driver_sql("SELECT x, n FROM probe").all())
    assert rows == {1: 11, 2: 11}
