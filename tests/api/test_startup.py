"""`m3grpc serve` refuses a start it cannot honour: one `m3grpc: ...` line on
stderr, exit status 2, no traceback, and nothing left serving.

Each case runs the real CLI as a subprocess (cwd = repository root), like an
operator would; the PostgreSQL case needs no PostgreSQL, only a closed port.
"""

from __future__ import annotations

import importlib.util
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from m3grpc.storage.schema_version import HEAD_REVISION
from tests.api.conftest import ROOT, start_server, write_config


def refused(*args: str) -> str:
    """Run `m3grpc serve ARGS`; assert the one-line refusal and return that line."""
    done = subprocess.run(
        [sys.executable, "-m", "m3grpc.cli", "serve", *args],  # the default log level
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "serving on" not in done.stdout, done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("m3grpc: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def closed_port() -> int:
    """A loopback port nothing listens on (bound once by the OS, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_second_server_on_a_busy_port_is_refused(tmp_path: Path) -> None:
    first = start_server(tmp_path)
    try:
        config = write_config(tmp_path / "second.toml", tmp_path / "second.sqlite")
        line = refused("--config", str(config), "--listen", first.address)
        assert first.address in line and "already in use" in line, line
        assert not (tmp_path / "second.sqlite").exists()  # refused before touching anything
        # The first server still owns the port alone and keeps serving.
        assert first.process is not None and first.process.poll() is None
        stubs = first.stubs()
        try:
            stubs.submit_managed()
        finally:
            stubs.close()
    finally:
        first.terminate()


def test_a_refused_listen_address_names_its_option_or_key(tmp_path: Path) -> None:
    # "listen port 99999 is out of range" did not say which of three addresses.
    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    for option in ("--listen", "--metrics-listen", "--inbox-listen"):
        line = refused("--config", str(config), option, "127.0.0.1:99999")
        assert line == (
            f"m3grpc: {option}: port 99999 of '127.0.0.1:99999' is out of range (0-65535)"
        )
        line = refused("--config", str(config), option, "localhost")
        assert line == f"m3grpc: {option}: 'localhost' is not HOST:PORT"
    for key, table in (("listen", ""), ("metrics_listen", ""), ("listen", "[inbox]\n")):
        bad = tmp_path / "bad.toml"
        bad.write_text(f'{table}{key} = "127.0.0.1:99999"\n')
        line = refused("--config", str(bad))
        named = "inbox.listen" if table else key
        assert line.endswith(
            f": {named}: port 99999 of '127.0.0.1:99999' is out of range (0-65535)"
        ), line
    # A port another process listens on, by option and by key.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = f"127.0.0.1:{holder.getsockname()[1]}"
        line = refused("--config", str(config), "--listen", "127.0.0.1:0", "--inbox-listen", busy)
        assert line.startswith(f"m3grpc: cannot listen on {busy} (--inbox-listen): "), line
        keyed = tmp_path / "busy.toml"
        keyed.write_text(f'metrics_listen = "{busy}"\n' + config.read_text())
        line = refused("--config", str(keyed), "--listen", "127.0.0.1:0")
        assert line.startswith(f"m3grpc: cannot listen on {busy} (metrics_listen): "), line
    assert not (tmp_path / "m3.sqlite").exists()  # refused before opening the database


def test_listen_port_out_of_range_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    bad = tmp_path / "bad.toml"
    bad.write_text('listen = "127.0.0.1:99999"\n' + config.read_text())
    line = refused("--config", str(bad))
    assert "99999" in line and "out of range" in line, line
    # The same check for the --listen override of a valid file.
    line = refused("--config", str(config), "--listen", "127.0.0.1:70000")
    assert "70000" in line, line
    line = refused("--config", str(config), "--listen", "127.0.0.1:http")
    assert "127.0.0.1:http" in line, line
    assert not (tmp_path / "m3.sqlite").exists()  # refused before opening the database


def test_unreachable_postgresql_is_refused(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://m3:hunter2@127.0.0.1:{closed_port()}/m3"
    config = write_config(tmp_path / "m3.toml", url)
    line = refused("--config", str(config), "--listen", "127.0.0.1:0")
    assert "cannot open database" in line and "refused" in line, line
    assert "hunter2" not in line  # the password is not echoed


def test_missing_database_driver_is_refused(tmp_path: Path) -> None:
    # A real SQLAlchemy dialect whose DBAPI driver is not installed here.
    candidates = [("postgresql+pg8000", "pg8000"), ("mysql+pymysql", "pymysql")]
    missing = [(dialect, module) for dialect, module in candidates if not installed(module)]
    if not missing:
        pytest.skip("every candidate driver is installed")
    dialect, module = missing[0]
    config = write_config(tmp_path / "m3.toml", f"{dialect}://m3@127.0.0.1:{closed_port()}/m3")
    line = refused("--config", str(config), "--listen", "127.0.0.1:0")
    assert "cannot open database" in line and repr(module) in line, line


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def test_unusable_sqlite_directory_is_refused(tmp_path: Path) -> None:
    # A regular file where a directory should be: fails for root too, unlike chmod.
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory\n")
    database = blocker / "db.sqlite"
    config = write_config(tmp_path / "m3.toml", database)
    line = refused("--config", str(config), "--listen", "127.0.0.1:0")
    assert f"cannot open database {database}" in line, line


def test_missing_or_invalid_config_file_is_refused(tmp_path: Path) -> None:
    line = refused("--config", str(tmp_path / "absent.toml"))
    assert "absent.toml" in line, line
    broken = tmp_path / "broken.toml"
    broken.write_text("listen = \n")
    assert "broken.toml" in refused("--config", str(broken))
    invalid = tmp_path / "invalid.toml"
    invalid.write_text('database = ""\n[workers]\npool_size = -1\nunknown = 1\n')
    line = refused("--config", str(invalid))
    assert "database" in line and "workers.pool_size" in line and "workers.unknown" in line, line


def test_a_schema_it_cannot_serve_is_refused(tmp_path: Path) -> None:
    # A database a newer M3 migrated: refused, and left as it was.
    database = tmp_path / "ahead.sqlite"
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE m3_schema_version (version_num VARCHAR(32) PRIMARY KEY)")
        conn.execute("INSERT INTO m3_schema_version VALUES ('9999')")
    config = write_config(tmp_path / "m3.toml", database)
    line = refused("--config", str(config), "--listen", "127.0.0.1:0")
    assert line == (
        f"m3grpc: database {database}: schema at revision 9999, unknown to this version "
        f"of M3 (head {HEAD_REVISION}): a newer M3 wrote it; run that version"
    )
    with sqlite3.connect(database) as conn:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    assert tables == {"m3_schema_version"}  # no table created next to it
    # M3 tables from before migrations that do not match the schema: refused too.
    partial = tmp_path / "partial.sqlite"
    with sqlite3.connect(partial) as conn:
        conn.execute("CREATE TABLE m3_executions (execution_id VARCHAR(64) PRIMARY KEY)")
    config = write_config(tmp_path / "partial.toml", partial)
    line = refused("--config", str(config), "--listen", "127.0.0.1:0")
    assert line.startswith(f"m3grpc: database {partial}: schema unversioned: "), line
    assert f"differ from revision {HEAD_REVISION}" in line, line
