"""The Node.js tools installed by scripts/setup-node.sh (it is idempotent and fast)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup-node.sh"


@functools.cache
def node_tools() -> dict[str, str]:
    """M3_NODE22, M3_CONFORMANCE_JS, M3_EVERYTHING_JS, ... as printed by setup-node.sh."""
    output = subprocess.run(
        ["bash", str(SETUP)], check=True, capture_output=True, text=True, timeout=600
    ).stdout
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
