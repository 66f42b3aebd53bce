"""Install tests' shared steps: run a command with no PYTHONPATH (so only an
installed copy of m3grpc counts) and build this checkout's wheel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.locks import PYTHON_BUILD, exclusive

ROOT = Path(__file__).resolve().parents[2]


def run_installed(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`args` run to success with PYTHONPATH removed from the environment."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


def build_wheel(dist: Path, *, cwd: Path | None = None) -> Path:
    """This checkout's wheel, built into `dist` with the build tools already installed
    (one build at a time: they all write ROOT/build)."""
    with exclusive(PYTHON_BUILD):
        run_installed(
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            dist,
            ROOT,
            cwd=cwd,
        )
    return next(dist.glob("m3grpc-*.whl"))
