"""The README's run command, `m3grpc demo`, works and shows the flow end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_runs_the_service_and_the_seed_flow() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "m3grpc.cli", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "Health        -> SERVING" in completed.stdout
    assert "book_shipment: booked shipment to 1 Main Street, Pune" in completed.stdout
    assert "SIGTERM       -> service exited with 0" in completed.stdout


def test_demo_with_the_codex_harness() -> None:
    """`m3grpc demo --harness codex`: Codex (on the fake model) calls the tool, the round is
    answered over gRPC, the shipment is booked."""
    completed = subprocess.run(
        [sys.executable, "-m", "m3grpc.cli", "demo", "--harness", "codex"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "fake model    -> http://127.0.0.1:" in completed.stdout
    assert "book_shipment: booked shipment to 1 Main Street, Pune" in completed.stdout
    assert "SIGTERM       -> service exited with 0" in completed.stdout
