"""What `m3grpc serve` does to its own process for memory (RSS with many paused
executions): glibc's malloc arenas capped unless the operator chose a number with
MALLOC_ARENA_MAX, and no trio; the same in its worker processes."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from m3grpc import cli

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="malloc arenas are glibc's")
def test_serve_caps_the_arenas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert cli._limit_malloc_arenas() is True


def test_the_operators_setting_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert cli._limit_malloc_arenas() is False


def test_serve_keeps_trio_out_and_its_http_clients_still_work() -> None:
    # In a child: the test process may have trio loaded (and must keep it).
    code = (
        "import sys\n"
        "from m3grpc import cli\n"
        "cli._skip_trio()\n"
        "from m3grpc.harness.http_clients import HttpClients\n"
        "client = HttpClients().client({})\n"
        "assert sys.modules['trio'] is None, 'trio was imported'\n"
        "print(type(client).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "AsyncClient"


def test_a_worker_process_keeps_trio_out_as_serve_does(tmp_path: Path) -> None:
    # `workers.processes` children run m3grpc.api.worker_processes.main; with stdin at
    # its end the child starts its runtime and stops at once (its parent is "gone").
    config = tmp_path / "m3.toml"
    config.write_text(f"database = {json.dumps(str(tmp_path / 'm3.sqlite'))}\n")
    code = (
        "import sys\n"
        "from m3grpc.api.worker_processes import main\n"
        "code = main(['--config', sys.argv[1]])\n"
        "assert 'm3grpc.harness.http_clients' in sys.modules, 'the harness was not loaded'\n"
        "assert sys.modules['trio'] is None, 'trio was imported'\n"
        "print('ok', code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(config)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok 0"
