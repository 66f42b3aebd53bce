"""Claude Code helpers for tests: the installed binary, and what of its runs is still alive."""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

from m3grpc.harness.claude_code_host import HOME_PREFIX

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup-claude-code.sh"


@functools.cache
def claude_code_binary() -> str:
    """The native claude binary scripts/setup-claude-code.sh installed (idempotent and fast
    once installed)."""
    output = subprocess.run(
        ["bash", str(SETUP)], check=True, capture_output=True, text=True, timeout=900
    ).stdout
    values = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    return values["M3_CLAUDE_CODE_BIN"]


def _live(entry: Path) -> bool:
    try:
        return "State:\tZ" not in (entry / "status").read_text()
    except OSError:
        return False


def claude_code_processes(binary: str) -> list[int]:
    """Live (not zombie) processes running this checkout's claude binary with a
    CLAUDE_CONFIG_DIR in this process's temporary directory: the ones this test
    process started, not another pytest-xdist worker's (tests/conftest.py gives each
    worker a temporary directory of its own)."""
    homes = f"CLAUDE_CONFIG_DIR={Path(tempfile.gettempdir()) / HOME_PREFIX}".encode()
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline[0] != binary.encode() or not _live(entry):
            continue
        if any(variable.startswith(homes) for variable in environ):
            pids.append(int(entry.name))
    return pids


def group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid` (an agent and its MCP servers)."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces) in parentheses:
        # state, ppid, pgrp, ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and _live(entry):
            members.append(int(entry.name))
    return members


def homes_of(pid: int) -> list[Path]:
    """The temporary homes that process `pid` created and that still exist."""
    return list(Path(tempfile.gettempdir()).glob(f"{HOME_PREFIX}{pid}-*"))
