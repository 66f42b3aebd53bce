"""Codex helpers for tests: the installed binary, and what of Codex is still alive."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from m3grpc.harness.codex import HOME_PREFIX
from tests.support.agents import agent_processes, installed
from tests.support.agents import homes_of as _homes_of

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup-codex.sh"
# The variable holding the fake model's key in tests (Codex's provider `env_key`).
KEY_VAR = "M3_FAKE_MODEL_KEY"


@functools.cache
def codex_binary() -> str:
    """The native codex binary scripts/setup-codex.sh installed."""
    return installed(SETUP, "M3_CODEX_BIN")


def codex_processes(codex_bin: str) -> list[int]:
    """Live processes of this checkout's codex binary that this test process's harnesses
    started (by their CODEX_HOME, see tests/support/agents.py)."""
    return agent_processes(codex_bin, "CODEX_HOME", HOME_PREFIX)


def homes_of(pid: int) -> list[Path]:
    """The temporary CODEX_HOMEs that process `pid` created and that still exist."""
    return _homes_of(HOME_PREFIX, pid)


def assert_nothing_left(codex_bin: str) -> None:
    """No Codex process and no temporary home of this test process is left."""
    assert codex_processes(codex_bin) == []
    assert homes_of(os.getpid()) == []
