"""Codex helpers for tests: the installed binary, and what of Codex is still alive."""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

from m3grpc.harness.codex import HOME_PREFIX

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup-codex.sh"


@functools.cache
def codex_binary() -> str:
    """The native codex binary scripts/setup-codex.sh installed (it is idempotent and fast)."""
    output = subprocess.run(
        ["bash", str(SETUP)], check=True, capture_output=True, text=True, timeout=600
    ).stdout
    values = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    return values["M3_CODEX_BIN"]


def codex_processes(codex_bin: str) -> list[int]:
    """Live (not zombie) processes running this checkout's codex binary."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if cmdline and cmdline[0] == codex_bin.encode() and "State:\tZ" not in status:
            pids.append(int(entry.name))
    return pids


def homes_of(pid: int) -> list[Path]:
    """The temporary CODEX_HOMEs that process `pid` created and that still exist."""
    return list(Path(tempfile.gettempdir()).glob(f"{HOME_PREFIX}{pid}-*"))
