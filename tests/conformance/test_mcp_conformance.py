"""The official MCP client conformance suite, with M3's scripted harness as the client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.node import node_tools

CLIENT = Path(__file__).with_name("client.py")
REPO = Path(__file__).parents[2]


@pytest.mark.node
@pytest.mark.parametrize("scenario", ["elicitation-sep1034-client-defaults"])
def test_client_conformance_scenario(scenario: str) -> None:
    tools = node_tools()
    completed = subprocess.run(
        [
            tools["M3_NODE22"],
            tools["M3_CONFORMANCE_JS"],
            "client",
            "--command",
            f"{sys.executable} {CLIENT}",
            "--scenario",
            scenario,
            "--verbose",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr[-4000:] + completed.stdout[-4000:]
    start = completed.stdout.index("[")
    checks = json.loads(completed.stdout[start : completed.stdout.rindex("]") + 1])
    statuses = {check["id"]: check["status"] for check in checks if check["status"] != "INFO"}
    assert statuses and set(statuses.values()) == {"SUCCESS"}, statuses
