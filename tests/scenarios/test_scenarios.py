"""The cross-language scenario suite: one live `m3grpc serve`, one driver per language.

Every language must pass the same scenarios (tests/scenarios/scenarios.json); a
failure names the language and the step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from m3grpc.devtools.fake_model import FAKE_API_KEY, FakeModel
from tests.api.conftest import ServerProcess, start_server

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "scenarios" / "scenarios.json"


def _driver(language: str, target: str) -> tuple[list[str], Path]:
    arguments = ["--target", target, "--scenarios", str(SCENARIOS)]
    if language == "python":
        return [sys.executable, str(ROOT / "tests" / "scenarios" / "driver.py"), *arguments], ROOT
    if language == "typescript":
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "setup-typescript.sh")],
            check=True,
            capture_output=True,
            timeout=600,
        )
        npm = shutil.which("npm") or "npm"
        return [
            npm,
            "--prefix",
            str(ROOT / "clients" / "typescript"),
            "run",
            "--silent",
            "scenarios",
            "--",
            *arguments,
        ], ROOT
    go = shutil.which("go") or "go"
    return [go, "run", "./cmd/m3-scenarios", *arguments], ROOT / "clients" / "go"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # The codex scenario's agent talks to the fake model (the stand-in for a hosted LLM);
    # the service's codex harness reads its settings from M3_CODEX_* at start.
    with FakeModel() as model, pytest.MonkeyPatch.context() as env:
        env.setenv("M3_CODEX_BASE_URL", model.base_url)
        env.setenv("M3_CODEX_ENV_KEY", "M3_FAKE_MODEL_KEY")
        env.setenv("M3_FAKE_MODEL_KEY", FAKE_API_KEY)
        process = start_server(tmp_path_factory.mktemp("scenarios"), pool_size=8)
        try:
            yield process
        finally:
            process.terminate()


@pytest.mark.parametrize("language", ["python", "typescript", "go"])
def test_language_passes_every_scenario(server: ServerProcess, language: str) -> None:
    command, cwd = _driver(language, server.address)
    completed = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    output = completed.stdout + completed.stderr
    failures = [line for line in output.splitlines() if line.startswith("FAIL ")]
    assert completed.returncode == 0 and not failures, "\n".join(failures) or output[-4000:]
    summary = [line for line in completed.stdout.splitlines() if line.startswith(f"{language}: ")]
    # Every scenario in the file ran and passed (none silently skipped).
    count = len(json.loads(SCENARIOS.read_text())["scenarios"])
    assert summary == [f"{language}: {count} passed, 0 failed"], output[-4000:]
