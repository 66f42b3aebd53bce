"""docker/entrypoint.sh: chooses or writes the configuration from the environment,
then execs `m3grpc` (so SIGTERM reaches the service, which exits 0); `health`, `db`
and `check-config` run on the same configuration."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from m3grpc.devtools.serve_process import SERVE_COMMAND
from m3grpc.storage.schema_version import HEAD_REVISION
from tests.docker.conftest import EXAMPLES, EntrypointServer, entrypoint_env, run_entrypoint

ADDRESS = {"street": "1 Main Street", "city": "Pune"}


EXAMPLE_BINDING = {
    "command": "python3",
    "args": [str(EXAMPLES / "shipping_server.py")],
    "protocol": "legacy",
}


def test_without_a_config_it_writes_one_and_serves_a_round(tmp_path: Path) -> None:
    database = tmp_path / "data" / "m3.sqlite"
    database.parent.mkdir()
    env = entrypoint_env(tmp_path / "run", M3_DATABASE=str(database), M3_LISTEN="127.0.0.1:0")
    server = EntrypointServer(env, tmp_path / "server.log").start()
    try:
        written = tmp_path / "run" / "m3.toml"
        # The bundled example server is bound (it served "servers: none bound").
        assert tomllib.loads(written.read_text()) == {
            "database": str(database),
            "servers": {"shipping": EXAMPLE_BINDING},
        }
        # The image's HEALTHCHECK command, through the entrypoint.
        health = run_entrypoint("health", "--server", server.address, env=env)
        assert (health.returncode, health.stdout.strip()) == (0, "SERVING"), health.stderr
        # A first round against the container, from the command line.
        result = first_round(server.address)
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()  # exec'd: m3grpc itself got SIGTERM
    assert result["outcome"] == "succeeded", result
    assert result["operations"][0]["result"]["content"][0]["text"] == (
        "booked shipment to 1 Main Street, Pune"
    )
    log = (tmp_path / "server.log").read_text()
    # M3_LOG_LEVEL defaults to info: serve logged the check-config summary.
    assert f"config check: ok    config: {written}" in log, log
    assert "config check: ok    database: " in log and f"revision {HEAD_REVISION}" in log, log
    assert "config check: ok    server shipping (stdio): " in log, log
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT version_num FROM m3_schema_version").fetchall() == [
            (HEAD_REVISION,)
        ]


def first_round(address: str) -> dict[str, Any]:
    """submit, pending, respond, result: the README's command-line session."""

    def m3grpc(*args: str) -> str:
        done = subprocess.run(
            [*SERVE_COMMAND, *args, "--server", address],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    execution = m3grpc(
        "submit", "--binding", "shipping", "--tool", "shipping:book_shipment", "--prompt", "Book."
    ).strip()
    m3grpc("pending", execution, "--wait", "120")
    m3grpc("respond", "--execution", execution, "--accept", json.dumps(ADDRESS))
    return dict(json.loads(m3grpc("result", execution, "--wait", "120", "--json")))


def test_the_example_server_can_be_left_out(tmp_path: Path) -> None:
    env = entrypoint_env(tmp_path / "run", M3_DATABASE="db.sqlite", M3_EXAMPLE_SERVER="0")
    shown = run_entrypoint("sh", "-c", 'cat "$M3_CONFIG"', env=env)
    assert tomllib.loads(shown.stdout) == {"database": "db.sqlite"}
    for wrong, error in (
        ({"M3_EXAMPLE_SERVER": "yes"}, "M3_EXAMPLE_SERVER=yes: 1 or 0"),
        ({"M3_EXAMPLES_DIR": str(tmp_path)}, f"{tmp_path}/shipping_server.py: no such file"),
        ({"M3_EXAMPLE_SERVER": "1", "M3_CONFIG_TOML": "x = 1"}, "not with M3_EXAMPLE_SERVER"),
    ):
        bad = run_entrypoint(env=entrypoint_env(tmp_path / "run", **wrong))
        assert bad.returncode == 2 and error in bad.stderr, bad.stderr


def test_a_config_in_the_environment_and_the_operator_commands(tmp_path: Path) -> None:
    database = tmp_path / "m3.sqlite"
    env = entrypoint_env(
        tmp_path / "run",
        M3_CONFIG_TOML=f'database = "{database}"\n[workers]\npool_size = 2\n',
    )
    upgraded = run_entrypoint("db", "upgrade", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert (
        "schema empty" in upgraded.stdout
        and f"revision {HEAD_REVISION} (current)" in upgraded.stdout
    )
    checked = run_entrypoint("check-config", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "pool_size 2" in checked.stdout
    assert f"schema at revision {HEAD_REVISION} (current)" in checked.stdout
    assert checked.stdout.splitlines()[-1] == "configuration OK"
    # Anything else runs as given, with M3_CONFIG naming the written file.
    shown = run_entrypoint("sh", "-c", 'cat "$M3_CONFIG"', env=env)
    assert shown.stdout == f'database = "{database}"\n[workers]\npool_size = 2\n\n'


def test_a_mounted_config_and_db_upgrade_before_serving(tmp_path: Path) -> None:
    database = tmp_path / "m3.sqlite"
    config = tmp_path / "mounted.toml"
    config.write_text(f'database = "{database}"\nlisten = "127.0.0.1:1"\n')
    env = entrypoint_env(
        tmp_path / "run",
        M3_CONFIG=str(config),
        M3_LISTEN="127.0.0.1:0",  # M3_LISTEN wins over the file's listen
        M3_DB_UPGRADE="1",
        M3_LOG_LEVEL="warning",
    )
    server = EntrypointServer(env, tmp_path / "server.log").start()
    try:
        assert server.address.startswith("127.0.0.1:") and server.address != "127.0.0.1:1"
        health = run_entrypoint("health", "--server", server.address, env=env)
        assert health.returncode == 0, health.stderr
    finally:
        assert server.stop() == 0, server.log_tail()
    assert not (tmp_path / "run").exists()  # the mounted file was used as it is


def test_contradictory_or_missing_configuration_is_refused(tmp_path: Path) -> None:
    missing = run_entrypoint(
        env=entrypoint_env(tmp_path / "run", M3_CONFIG=str(tmp_path / "absent.toml"))
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith("m3grpc-entrypoint: M3_CONFIG=")
    assert "no such file" in missing.stderr and len(missing.stderr.splitlines()) == 1
    both = run_entrypoint(
        env=entrypoint_env(
            tmp_path / "run", M3_CONFIG_TOML='listen = "127.0.0.1:0"', M3_DATABASE="x.sqlite"
        )
    )
    assert both.returncode == 2 and "not M3_DATABASE" in both.stderr, both.stderr
    assert not (tmp_path / "x.sqlite").exists()


def test_the_default_listen_needs_tls_and_auth_or_allow_insecure(tmp_path: Path) -> None:
    # The image listens on 0.0.0.0, which serve refuses without TLS and authentication
    # (before it binds anything): M3_ALLOW_INSECURE=1 says so in the written config.
    database = str(tmp_path / "m3.sqlite")
    refused = run_entrypoint(
        env=entrypoint_env(tmp_path / "run", M3_DATABASE=database, M3_LISTEN="0.0.0.0:0")
    )
    assert refused.returncode == 2
    assert "refusing to serve on 0.0.0.0:0" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    env = entrypoint_env(tmp_path / "run", M3_DATABASE=database, M3_ALLOW_INSECURE="1")
    shown = run_entrypoint("sh", "-c", 'cat "$M3_CONFIG"', env=env)
    assert tomllib.loads(shown.stdout) == {
        "database": database,
        "allow_insecure": True,
        "servers": {"shipping": EXAMPLE_BINDING},
    }
    for wrong in (
        {"M3_ALLOW_INSECURE": "yes"},
        {"M3_ALLOW_INSECURE": "1", "M3_CONFIG_TOML": f'database = "{database}"'},
    ):
        bad = run_entrypoint(env=entrypoint_env(tmp_path / "run", M3_DATABASE=database, **wrong))
        assert bad.returncode == 2 and bad.stderr.startswith("m3grpc-entrypoint: "), bad.stderr


def test_serve_options_pass_through(tmp_path: Path) -> None:
    # Arguments that start with '-' are added to `m3grpc serve`: a bad one is its error.
    done = run_entrypoint(
        "--listen", "127.0.0.1:99999", env=entrypoint_env(tmp_path / "run", M3_DATABASE="db")
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("m3grpc: ") and "99999" in done.stderr
