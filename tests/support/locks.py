"""Locks across the test processes of one checkout (pytest-xdist runs the suite in
several workers): held around steps that write into the checkout itself, which
every worker shares, and around what reads those writes."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# clients/typescript/dist: `tsc` rewrites it in place (npm run build, `npm pack`'s and
# `npm install DIR`'s prepare, `npm run scenarios`), so a reader of dist/ can meet a
# file another worker has just truncated.
TYPESCRIPT_DIST = ROOT / "clients" / "typescript" / "package.json"
# `pip wheel ROOT` builds in ROOT/build and ROOT/m3grpc.egg-info.
PYTHON_BUILD = ROOT / "pyproject.toml"


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Holds an exclusive flock(2) on `path` (an existing file that names what it
    guards) until the block ends; the kernel releases it if the process dies."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
