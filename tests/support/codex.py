"""Codex helpers for tests: the installed binary, and what of Codex is still alive."""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path

from m3grpc.harness.codex import HOME_PREFIX

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup-codex.sh"
# The variable holding the fake model's key in tests (Codex's provider `env_key`).
KEY_VAR = "M3_FAKE_MODEL_KEY"


@functools.cache
def codex_binary() -> str:
    """The native codex binary scripts/setup-codex.sh installed (it is idempotent and fast)."""
    output = subprocess.run(
        ["bash", str(SETUP)], check=True, capture_output=True, text=True, timeout=600
    ).stdout
    values = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    return values["M3_CODEX_BIN"]


def codex_processes(codex_bin: str) -> list[int]:
    """Live (not zombie) processes running this checkout's codex binary with a
    CODEX_HOME in this process's temporary directory: the ones this test process's
    harnesses (in process or in its subprocesses) started, not another pytest-xdist
    worker's (tests/conftest.py gives each worker a temporary directory of its own)."""
    homes = f"CODEX_HOME={Path(tempfile.gettempdir()) / HOME_PREFIX}".encode()
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if not cmdline or cmdline[0] != codex_bin.encode() or "State:\tZ" in status:
            continue
        if any(variable.startswith(homes) for variable in environ):
            pids.append(int(entry.name))
    return pids


def homes_of(pid: int) -> list[Path]:
    """The temporary CODEX_HOMEs that process `pid` created and that still exist."""
    return list(Path(tempfile.gettempdir()).glob(f"{HOME_PREFIX}{pid}-*"))


def assert_nothing_left(codex_bin: str) -> None:
    """No Codex process and no temporary home of this test process is left."""
    assert codex_processes(codex_bin) == []
    assert homes_of(os.getpid()) == []
