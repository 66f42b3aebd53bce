"""The README's run command, `m3grpc demo`, works and shows the flow end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _demo(*args: str, timeout: float) -> str:
    """Run `m3grpc demo ARGS`; its output, once it exited with 0 and booked the shipment."""
    completed = subprocess.run(
        [sys.executable, "-m", "m3grpc.cli", "demo", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "book_shipment: booked shipment to 1 Main Street, Pune" in completed.stdout
    assert "SIGTERM       -> service exited with 0" in completed.stdout
    return completed.stdout


def test_demo_runs_the_service_and_the_seed_flow() -> None:
    assert "Health        -> SERVING" in _demo(timeout=180)


def test_demo_with_the_codex_harness() -> None:
    """`m3grpc demo --harness codex`: Codex (on the fake model) calls the tool, the round is
    answered over gRPC, the shipment is booked."""
    assert "fake model    -> http://127.0.0.1:" in _demo("--harness", "codex", timeout=300)


def test_demo_with_the_claude_code_harness() -> None:
    """`m3grpc demo --harness claude-code`: Claude Code (on the fake Messages API) calls the
    tool, the round is answered over gRPC, the shipment is booked."""
    output = _demo("--harness", "claude-code", timeout=300)
    assert "Agent         -> claude-code says 'Done: booked shipment" in output


def test_demo_with_codex_not_installed_says_what_to_run(tmp_path: Path) -> None:
    """Before scripts/setup-codex.sh: one line naming the command, not `setpriv: failed to
    execute codex`."""
    completed = subprocess.run(
        [sys.executable, "-m", "m3grpc.cli", "demo", "--harness", "codex"],
        cwd=ROOT,
        env={**os.environ, "M3_CODEX_BIN": str(tmp_path / "codex")},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 1
    assert "agent_unavailable: the Codex CLI is not installed" in completed.stdout
    assert "bash scripts/setup-codex.sh" in completed.stdout
    assert "setpriv" not in completed.stdout + completed.stderr


def test_the_readme_run_command_is_this_demo_in_a_virtual_environment() -> None:
    """The README's first command creates a venv in the command itself (a system Python
    under PEP 668 refuses `pip install`) and runs the demo tested above from it; the
    second command is scripts/test.sh."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## The two commands", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert commands[0] == (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[server]' && .venv/bin/m3grpc demo"
    )
    assert commands[-1] == "bash scripts/test.sh"
