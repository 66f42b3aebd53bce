"""The README's run command, `m3grpc demo`, works and shows the flow end to end."""

from __future__ import annotations

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
