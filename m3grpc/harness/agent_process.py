"""What the harnesses of agent CLIs (Codex, Claude Code) share about the agent's process.

One agent process per execution, in its own process group, with a temporary home
named `<prefix><worker pid>-<random>` that is removed when the run ends. These
helpers start it so that the kernel kills it with the thread that started it, find
the homes of dead workers, and signal a whole group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def parent_death_prefix() -> list[str]:
    """A command prefix that makes the kernel SIGKILL the agent when the thread that
    started it dies.

    util-linux `setpriv --pdeathsig` sets it before exec'ing the agent. Not a Python
    `preexec_fn`: running Python between fork and exec in a process with gRPC's
    threads can crash the child before exec (seen here: Codex "exited" at once,
    with no output). Both agents also exit when their stdin closes, so this is a
    second line.
    """
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def make_home(prefix: str) -> Path:
    """A new temporary home for one run of this process: `<tmp>/<prefix><pid>-<random>`."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def remove_stale_homes(prefix: str) -> None:
    """Remove the temporary homes (made by `make_home(prefix)`) of dead processes:
    a worker killed mid-execution leaves its home behind."""
    root = Path(tempfile.gettempdir())
    for home in root.glob(f"{prefix}*-*"):
        pid_text = home.name.removeprefix(prefix).split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(home, ignore_errors=True)
        except PermissionError:
            continue  # alive, someone else's


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send `sig` to the process group led by `pid`, if any of it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def read_json_lines(
    stream: asyncio.StreamReader,
    handle: Callable[[dict[str, Any]], None],
    *,
    agent: str,
    closed: asyncio.Event,
    waiting: Mapping[Any, asyncio.Future[Any]],
    error: Exception,
) -> None:
    """Hand each line of `stream` that is a JSON object to `handle`, until the stream ends;
    then set `closed` and fail every request still `waiting` for an answer with `error`.

    Both agents write one JSON message a line. Other lines are logged and skipped, and an
    exception of `handle` is logged: a message misread must not end the run.
    """
    try:
        while line := await stream.readline():
            try:
                message = json.loads(line)
            except ValueError:
                logger.debug("%s wrote a non-JSON line: %r", agent, line[:200])
                continue
            if not isinstance(message, dict):
                continue
            try:
                handle(message)
            except Exception:
                logger.exception("cannot handle %s message %.200r", agent, message)
    finally:
        closed.set()
        for future in waiting.values():
            if not future.done():
                future.set_exception(error)


__all__ = [
    "make_home",
    "parent_death_prefix",
    "read_json_lines",
    "remove_stale_homes",
    "signal_group",
]
