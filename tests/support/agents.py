"""What the tests of agent CLIs (Codex, Claude Code) share: the binary a setup script
installed, and which of the agent's processes and homes are still there."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path


def installed(setup_script: Path, variable: str) -> str:
    """The path a setup script prints as `variable=...` (the scripts are idempotent and
    fast once installed)."""
    output = subprocess.run(
        ["bash", str(setup_script)], check=True, capture_output=True, text=True, timeout=900
    ).stdout
    values = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    return values[variable]


def _live(entry: Path) -> bool:
    try:
        return "State:\tZ" not in (entry / "status").read_text()
    except OSError:
        return False


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (a zombie whose parent is gone
    is reaped by whoever adopted it, in its own time)."""
    return _live(Path(f"/proc/{pid}"))


def agent_processes(binary: str, home_variable: str, home_prefix: str) -> list[int]:
    """Live (not zombie) processes running `binary` whose `home_variable` points into this
    process's temporary directory at a home named `home_prefix...`: the ones this test
    process's harnesses (in process or in its subprocesses) started, not another
    pytest-xdist worker's (tests/conftest.py gives each worker a temporary directory of
    its own)."""
    homes = f"{home_variable}={Path(tempfile.gettempdir()) / home_prefix}".encode()
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
        # The fields after the command name (in parentheses, may hold spaces):
        # state, ppid, pgrp, ...
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and _live(entry):
            members.append(int(entry.name))
    return members


def homes_of(home_prefix: str, pid: int) -> list[Path]:
    """The temporary homes named `home_prefix<pid>-...` that still exist."""
    return list(Path(tempfile.gettempdir()).glob(f"{home_prefix}{pid}-*"))
