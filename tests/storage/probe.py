"""A store engine with a `probe` table, for the group commit's tests: a write inserts
numbers, and inserting 666 makes SQLite roll the whole transaction back (a trigger's
RAISE(ROLLBACK)), as a full disk or an I/O error would."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event

from m3grpc.storage.engine import read_transaction, write_transaction
from m3grpc.storage.store_engine import create_store_engine


def probe_engine(directory: Path) -> Iterator[sa.Engine]:
    """The body of an `engine` fixture: the engine, disposed afterwards."""
    engine = create_store_engine(directory / "m3.sqlite")
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("CREATE TABLE probe (x INTEGER PRIMARY KEY)")
        conn.exec_driver_sql(
            "CREATE TRIGGER end_all BEFORE INSERT ON probe WHEN NEW.x = 666 "
            "BEGIN SELECT RAISE(ROLLBACK, 'the whole transaction ends'); END"
        )
    try:
        yield engine
    finally:
        engine.dispose()


def stored(engine: sa.Engine) -> list[int]:
    with read_transaction(engine) as conn:
        return list(conn.exec_driver_sql("SELECT x FROM probe ORDER BY x").scalars())


def insert(engine: sa.Engine, *values: int, then: Exception | None = None) -> None:
    """One write of `values`; `then` raised inside it, after them."""
    with write_transaction(engine) as conn:
        for value in values:
            conn.exec_driver_sql("INSERT INTO probe VALUES (?)", (value,))
        if then is not None:
            raise then


def count_commits(engine: sa.Engine) -> list[int]:
    """A one-item list counting `engine`'s commits from now on."""
    commits = [0]

    def on_commit(_conn: sa.Connection) -> None:
        commits[0] += 1

    event.listen(engine, "commit", on_commit)
    return commits


def hold_the_turn(engine: sa.Engine, value: int) -> tuple[threading.Thread, threading.Event]:
    """A thread whose write (of `value`) holds the write turn, inside its transaction,
    until the returned event is set (at most 30 s); returns once it holds it."""
    holding, release = threading.Event(), threading.Event()

    def write() -> None:
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("INSERT INTO probe VALUES (?)", (value,))
            holding.set()
            release.wait(30)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    if not holding.wait(30):
        raise AssertionError("the write never began")
    return writer, release
