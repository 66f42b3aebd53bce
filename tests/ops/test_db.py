"""`m3grpc db upgrade|status [--config FILE | --database URL]`: exit 0 when the schema
is (now) current, 1 when it cannot be, 2 for an unreadable configuration."""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from m3grpc.storage.schema_version import HEAD_REVISION
from tests.ops.conftest import m3grpc
from tests.storage.conftest import BACKENDS, backend_database


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from backend_database(request, tmp_path / "m3.sqlite")


def test_upgrade_then_status(database: str) -> None:
    before = m3grpc("db", "status", "--database", database)
    assert before.returncode == 1 and "schema empty" in before.stdout, before
    done = m3grpc("db", "upgrade", "--database", database)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(
        f"schema empty (revision {HEAD_REVISION} is created on first start) "
        f"-> schema at revision {HEAD_REVISION} (current)"
    ), done.stdout
    again = m3grpc("db", "upgrade", "--database", database)
    assert again.returncode == 0 and again.stdout.strip().endswith("; nothing to do"), again
    after = m3grpc("db", "status", "--database", database)
    assert after.returncode == 0 and f"schema at revision {HEAD_REVISION} (current)" in after.stdout


def test_the_database_comes_from_the_config(tmp_path: Path) -> None:
    database = tmp_path / "from-config.sqlite"
    config = tmp_path / "m3.toml"
    config.write_text(f'database = "{database}"\n')
    assert m3grpc("db", "upgrade", "--config", str(config)).returncode == 0
    # $M3_CONFIG when neither option is given (the container's entrypoint sets it).
    status = m3grpc("db", "status", env={**os.environ, "M3_CONFIG": str(config)})
    assert status.returncode == 0 and str(database) in status.stdout, status


def test_a_schema_it_cannot_serve_is_reported_on_one_line(tmp_path: Path) -> None:
    database = tmp_path / "ahead.sqlite"
    assert m3grpc("db", "upgrade", "--database", str(database)).returncode == 0
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE m3_schema_version SET version_num = '9999'")
    done = m3grpc("db", "upgrade", "--database", str(database))
    assert done.returncode == 1
    assert done.stderr.startswith(f"m3grpc: database {database}: schema at revision 9999")
    assert len(done.stderr.splitlines()) == 1


def test_unreachable_database_and_bad_config(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql+psycopg://m3:secret@127.0.0.1:{port}/m3?connect_timeout=5"
    done = m3grpc("db", "upgrade", "--database", url)
    assert done.returncode == 1 and done.stderr.startswith("m3grpc: database "), done.stderr
    assert "secret" not in done.stderr and len(done.stderr.splitlines()) == 1
    bad = tmp_path / "bad.toml"
    bad.write_text("database = \n")
    done = m3grpc("db", "upgrade", "--config", str(bad))
    assert done.returncode == 2 and done.stderr.startswith("m3grpc: cannot read "), done.stderr
