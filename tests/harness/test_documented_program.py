"""The product documentation's first program, run as written: run_documented_program.py runs
its text (documented_program.txt) with only `shipping_server` and M3_DOCS_CODEX_MODEL
supplied, as the documentation says the application does:

- with the codex harness, and with `"harness": "claude-code"` and a Claude model id in place
  of the codex pair (docs/guides/harnesses/claude-code.md's fragment under
  "The `claude-code` harness: Anthropic's Claude Code CLI");
- embedded (the program's own MCPTestKit) and over gRPC (the same text with the kit built
  by RemoteMCPTestKit against `m3grpc serve`, the seed program's only change).

The real agent binaries run; the hosted model is the loopback fake of each API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import ServerProcess, start_server
from tests.harness.matrix.agents import AGENTS, Agent

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("run_documented_program.py")
# shared/ sits beside the checkout (CI, /work/main) or one level up (/work/wt/<name>).
SPECS = [
    base / "shared" / "spec" / "managed-elicitation-input.txt"
    for base in (ROOT.parent, ROOT.parent.parent)
]


@pytest.fixture(params=["codex", "claude-code"])
def agent(request: pytest.FixtureRequest) -> Iterator[Agent]:
    with AGENTS[request.param]() as agent:
        yield agent


def run(agent: Agent, cwd: Path, *args: str) -> dict[str, object]:
    env = {
        **os.environ,
        **agent.service_env,
        "PYTHONPATH": str(ROOT),
        "M3_DOCS_CODEX_MODEL": agent.models[0],
    }
    done = subprocess.run(
        [sys.executable, str(RUNNER), "--harness", agent.name, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def check(agent: Agent, report: dict[str, object]) -> None:
    round, result = report["round"], report["result"]
    assert isinstance(round, dict) and isinstance(result, dict)
    assert round["operation_kind"] == "tool"
    assert (round["server"], round["operation_name"]) == ("shipping", "book_shipment")
    [(key, request)] = round["requests"].items()
    assert key == "shipping_address"
    assert request["message"] == "Where should the shipment go?"
    # A server written the usual way (a pydantic model): the key comes from its title.
    assert request["requested_schema"]["title"] == "ShippingAddress"
    assert result["outcome"] == "succeeded"
    text = result["operations"][0]["result"]["content"][0]["text"]
    assert text == "booked shipment to 1 Main Street, Pune"
    assert result["agent"]["harness"] == agent.name
    assert result["agent"]["final_message"] == f"Done: {text}"
    # The model was offered the bound server's tool through the agent, and nothing else.
    assert agent.offered_mcp_tools() == ["book_shipment"]
    assert agent.processes() == []


def test_the_documented_program_runs_embedded(agent: Agent, tmp_path: Path) -> None:
    check(agent, run(agent, tmp_path))


def test_the_documented_program_runs_over_grpc(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in agent.service_env.items():
        monkeypatch.setenv(name, value)
    service: ServerProcess = start_server(tmp_path)
    try:
        check(agent, run(agent, tmp_path, "--target", service.address))
    finally:
        service.terminate()


def test_the_program_is_the_documented_one() -> None:
    """documented_program.txt is the product documentation's program, to the character."""
    spec = next((path for path in SPECS if path.is_file()), None)
    if spec is None:
        pytest.skip("the product documentation is not beside this checkout")
    text = spec.read_text(encoding="utf-8")
    start = text.index("import os\nimport time")
    end = text.index("    store.close()\n", start) + len("    store.close()\n")
    assert (RUNNER.parent / "documented_program.txt").read_text(encoding="utf-8") == (
        text[start:end]
    )
