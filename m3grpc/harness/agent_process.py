"""What the harnesses of agent CLIs (Codex, Claude Code) share about the agent's process.

One agent process per execution, in its own process group, with a temporary home
named `<prefix><worker pid>-<random>` that is removed when the run ends. These
helpers start it so that the kernel kills it with the thread that started it, find
the homes of dead workers, and signal a whole group.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path


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


__all__ = ["make_home", "parent_death_prefix", "remove_stale_homes", "signal_group"]
