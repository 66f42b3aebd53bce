"""docker/entrypoint.sh run on this machine (no Docker here): `m3grpc` on PATH as the
image has it, a tmp directory for what the entrypoint writes, loopback ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from m3grpc.devtools.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
# The interpreter's scripts directory holds the `m3grpc` console script (pip install -e).
BIN = str(Path(sys.executable).parent)
# Variables of the entrypoint that the caller's environment must not leak into a test.
ENTRYPOINT_VARIABLES = (
    "M3_CONFIG",
    "M3_CONFIG_TOML",
    "M3_DATABASE",
    "M3_LISTEN",
    "M3_LOG_LEVEL",
    "M3_DB_UPGRADE",
    "M3_RUNTIME_DIR",
    "M3_SERVER",
    "M3_EXAMPLE_SERVER",
    "M3_EXAMPLES_DIR",
)
# Where the image has examples/shipping_server.py (the Dockerfile copies it there);
# here the checkout's.
EXAMPLES = ROOT / "examples"


def entrypoint_env(runtime_dir: Path, **variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENTRYPOINT_VARIABLES}
    env["PATH"] = os.pathsep.join([BIN, env.get("PATH", os.defpath)])
    env["M3_RUNTIME_DIR"] = str(runtime_dir)
    env["M3_EXAMPLES_DIR"] = str(EXAMPLES)
    env.update(variables)
    assert shutil.which("m3grpc", path=env["PATH"]), "m3grpc not installed (pip install -e .)"
    return env


def run_entrypoint(
    *args: str, env: Mapping[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENTRYPOINT), *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class EntrypointServer(ServeProcess):
    """The entrypoint with no arguments, as `docker run IMAGE` starts it; its ready
    line and SIGTERM handling are `m3grpc serve`'s own once it has exec'd."""

    def __init__(self, env: Mapping[str, str], log: Path, *args: str) -> None:
        super().__init__(Path("/nonexistent"), log=log, env=env)
        self.argv = [str(ENTRYPOINT), *args]
