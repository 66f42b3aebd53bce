"""Driver errors become typed errors in one place (storage/engine.py): a database
that refuses a commit or cannot be reached is StorageUnavailableError, lock
contention is ManagedInputConflict, and a mistake in M3's own statements stays
the driver's error (a bug, reported as INTERNAL)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import ProgrammingError

from m3grpc.errors import ConflictKind, ManagedInputConflict, StorageUnavailableError
from m3grpc.storage.engine import (
    STORAGE_RETRY_SECONDS,
    read_transaction,
    write_transaction,
)
from m3grpc.storage.store_engine import create_store_engine


def _engine(tmp_path: Path, busy_timeout_ms: int = 5000) -> sa.Engine:
    return create_store_engine(tmp_path / "m3.sqlite", busy_timeout_ms=busy_timeout_ms)


def test_a_refused_commit_is_storage_unavailable_and_rolled_back(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    try:
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("CREATE TABLE probe (x INTEGER)")
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse BEFORE INSERT ON probe WHEN NEW.x = 2 "
                "BEGIN SELECT RAISE(ABORT, 'secret value 2 refused'); END"
            )
        with pytest.raises(StorageUnavailableError) as caught, write_transaction(engine) as conn:
            conn.exec_driver_sql("INSERT INTO probe VALUES (1)")
            conn.exec_driver_sql("INSERT INTO probe VALUES (2)")
        assert caught.value.retry_after_seconds == STORAGE_RETRY_SECONDS
        assert "secret" not in str(caught.value)  # the driver's text stays in the log
        with read_transaction(engine) as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM probe").scalar_one() == 0
    finally:
        engine.dispose()


def test_an_unreachable_database_is_storage_unavailable_on_read(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'missing' / 'm3.sqlite'}")
    try:
        with pytest.raises(StorageUnavailableError), read_transaction(engine) as conn:
            conn.exec_driver_sql("SELECT 1")
    finally:
        engine.dispose()


def test_a_lock_past_the_busy_timeout_is_a_conflict(tmp_path: Path) -> None:
    engine = _engine(tmp_path, busy_timeout_ms=100)
    holder = sqlite3.connect(tmp_path / "m3.sqlite", isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(ManagedInputConflict) as caught, write_transaction(engine) as conn:
            conn.exec_driver_sql("SELECT 1")
        assert caught.value.conflict_kind is ConflictKind.CONCURRENT_UPDATE
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        engine.dispose()


def test_a_mistake_in_our_own_statement_is_not_masked(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    try:
        with pytest.raises(ProgrammingError), read_transaction(engine) as conn:
            conn.exec_driver_sql("SELECT ?", (1, 2))
    finally:
        engine.dispose()
