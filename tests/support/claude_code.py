"""Claude Code helpers for tests: the installed binary, and what of its runs is still alive."""

from __future__ import annotations

import functools
from pathlib import Path

from m3grpc.harness.claude_code_host import HOME_PREFIX
from tests.support.agents import agent_processes, group_members, installed
from tests.support.agents import homes_of as _homes_of

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup-claude-code.sh"


@functools.cache
def claude_code_binary() -> str:
    """The native claude binary scripts/setup-claude-code.sh installed."""
    return installed(SETUP, "M3_CLAUDE_CODE_BIN")


def claude_code_processes(binary: str) -> list[int]:
    """Live processes of `binary` that this test process's runs started (by their
    CLAUDE_CONFIG_DIR, see tests/support/agents.py)."""
    return agent_processes(binary, "CLAUDE_CONFIG_DIR", HOME_PREFIX)


def homes_of(pid: int) -> list[Path]:
    """The temporary homes that process `pid` created and that still exist."""
    return _homes_of(HOME_PREFIX, pid)


__all__ = ["claude_code_binary", "claude_code_processes", "group_members", "homes_of"]
