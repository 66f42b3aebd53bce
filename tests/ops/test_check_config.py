"""`m3grpc check-config FILE`: one line per check, `error` lines for problems, exit 0
when everything passed, 1 when a check failed, 2 when FILE is not a configuration."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from m3grpc.storage.schema_version import HEAD_REVISION
from tests.ops.conftest import m3grpc


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_good_configuration(tmp_path: Path) -> None:
    config = write(
        tmp_path / "m3.toml",
        f"""
database = "{tmp_path / "m3.sqlite"}"
listen = "127.0.0.1:50999"
[workers]
pool_size = 3
[servers.shipping]
command = {json.dumps(sys.executable)}
args = ["tests/mcp_servers/shipping.py"]
[servers.path_lookup]
command = "sh"
[servers.remote]
url = "https://mcp.example.test:8443/mcp?token=abc"
""",
    )
    done = m3grpc("check-config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"ok    config: {config}"
    assert "ok    listen: 127.0.0.1:50999" in lines
    assert any(line.startswith("ok    workers: pool_size 3,") for line in lines)
    # A database that does not exist yet is not created by the check.
    assert f"ok    database: {tmp_path / 'm3.sqlite'}: schema empty" in done.stdout
    assert not (tmp_path / "m3.sqlite").exists()
    assert f"ok    server shipping (stdio): {sys.executable} tests/mcp_servers/shipping.py" in lines
    assert any(line.startswith("ok    server path_lookup (stdio): /") for line in lines)
    # The URL without its query (it may carry a token), and the port it will use.
    assert "ok    server remote (http): https://mcp.example.test:8443/mcp (port 8443)" in lines
    assert lines[-1] == "configuration OK"


def test_every_problem_is_an_error_line(tmp_path: Path) -> None:
    database = tmp_path / "ahead.sqlite"
    assert m3grpc("db", "upgrade", "--database", str(database)).returncode == 0
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE m3_schema_version SET version_num = '9999'")
    config = write(
        tmp_path / "m3.toml",
        f"""
database = "{database}"
[servers.missing]
command = "no-such-command-m3grpc"
[servers.not_executable]
command = "./README.md"
[servers.no_cwd]
command = "sh"
cwd = "{tmp_path / "absent"}"
[servers.bad_port]
url = "http://127.0.0.1:99999/mcp"
""",
    )
    done = m3grpc("check-config", str(config))
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if line.startswith("error ")]
    assert errors == [
        f"error database: {database}: schema at revision 9999, unknown to this version of M3 "
        f"(head {HEAD_REVISION}): a newer M3 wrote it; run that version",
        "error server missing (stdio): command 'no-such-command-m3grpc' not found on PATH",
        "error server not_executable (stdio): command ./README.md is not an executable file",
        f"error server no_cwd (stdio): cwd {tmp_path / 'absent'} is not a directory",
        "error server bad_port (http): url http://127.0.0.1:99999/mcp: Port out of range 0-65535",
    ]
    assert done.stdout.splitlines()[-1] == "5 problems found"
    # --no-database leaves the database out.
    done = m3grpc("check-config", str(config), "--no-database")
    assert "database" not in done.stdout and done.stdout.splitlines()[-1] == "4 problems found"


def test_what_serve_would_refuse_is_an_error_line(tmp_path: Path) -> None:
    # check-config says what serve refuses: a public address without TLS and
    # authentication, a web inbox beyond loopback without tokens, [tls] files that
    # cannot be read.
    exposed = write(tmp_path / "exposed.toml", 'listen = "0.0.0.0:50051"\n')
    done = m3grpc("check-config", str(exposed), "--no-database")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "error listen: refusing to serve on 0.0.0.0:50051 without TLS and authentication" in (
        done.stdout
    )
    inbox = write(tmp_path / "inbox.toml", '[inbox]\nlisten = "0.0.0.0:8080"\n')
    done = m3grpc("check-config", str(inbox), "--no-database")
    assert done.returncode == 1 and "refusing to serve the web inbox on 0.0.0.0:8080" in (
        done.stdout
    )
    missing = tmp_path / "absent.pem"
    tls = write(tmp_path / "tls.toml", f'[tls]\ncert = "{missing}"\nkey = "{missing}"\n')
    done = m3grpc("check-config", str(tls), "--no-database")
    assert done.returncode == 1
    assert f"error tls: cert {missing}: No such file or directory" in done.stdout
    allowed = write(tmp_path / "allowed.toml", 'listen = "0.0.0.0:50051"\nallow_insecure = true\n')
    done = m3grpc("check-config", str(allowed), "--no-database")
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_invalid_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = write(tmp_path / "m3.toml", "[workers]\npool_size = -1\n")
    done = m3grpc("check-config", str(config))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"m3grpc: invalid configuration {config}: "
        "workers.pool_size: Input should be greater than or equal to 0"
    )
    missing = m3grpc("check-config", str(tmp_path / "absent.toml"))
    assert missing.returncode == 2 and missing.stderr.startswith("m3grpc: cannot read ")


def test_an_sqlite_file_that_cannot_be_created_is_an_error_for_every_command(
    tmp_path: Path,
) -> None:
    # check-config said "configuration OK", db status "created on first start", and
    # serve then refused to start ("unable to open database file").
    (tmp_path / "a-file").write_text("")
    for database, why in (
        (tmp_path / "no" / "such" / "m3.sqlite", f"{tmp_path / 'no' / 'such'} does not exist"),
        (tmp_path / "a-file" / "m3.sqlite", f"{tmp_path / 'a-file'} is not a directory"),
    ):
        problem = f"cannot create the SQLite file: directory {why}"
        config = write(tmp_path / "m3.toml", f'database = "{database}"\nlisten = "127.0.0.1:0"\n')
        checked = m3grpc("check-config", str(config))
        assert checked.returncode == 1, checked.stdout
        assert f"error database: {database}: {problem}" in checked.stdout.splitlines()
        for command in (("db", "status"), ("db", "upgrade")):
            done = m3grpc(*command, "--config", str(config))
            assert (done.returncode, done.stdout) == (1, ""), done
            assert done.stderr == f"m3grpc: database {database}: {problem}\n"
        served = m3grpc("serve", "--config", str(config))
        assert served.returncode == 2
        assert served.stderr == f"m3grpc: cannot open database {database}: {problem}\n"
        assert not database.parent.exists() or database.parent.is_file()
