"""The cross-language scenario suite: one live `m3grpc serve`, one driver per language.

Every language must pass the same scenarios (tests/scenarios/scenarios.json); a
failure names the language and the step. The suite runs twice: over plaintext
without authentication, and over TLS with a bearer token (each driver's --ca and
$M3_SCENARIO_TOKEN).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from m3grpc.api.auth import token_hash
from m3grpc.devtools.fake_model import FAKE_API_KEY, FakeModel
from tests.api.conftest import ServerProcess, write_config
from tests.support.certs import Authority
from tests.support.locks import TYPESCRIPT_DIST, exclusive

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "tests" / "scenarios" / "scenarios.json"
TOKEN = "scenario-token-31f0c2"


@dataclass
class Service:
    process: ServerProcess
    ca: Path | None = None  # TLS and TOKEN when set

    def arguments(self) -> list[str]:
        ca = ["--ca", str(self.ca)] if self.ca is not None else []
        return ["--target", self.process.address, "--scenarios", str(SCENARIOS), *ca]

    def environment(self) -> dict[str, str]:
        return {"M3_SCENARIO_TOKEN": TOKEN} if self.ca is not None else {}


def _driver(language: str, arguments: list[str]) -> tuple[list[str], Path]:
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


@pytest.fixture(scope="module", params=["plaintext", "tls+token"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    # The codex scenario's agent talks to the fake model (the stand-in for a hosted LLM);
    # the service's codex harness reads its settings from M3_CODEX_* at start.
    with FakeModel() as model, pytest.MonkeyPatch.context() as env:
        env.setenv("M3_CODEX_BASE_URL", model.base_url)
        env.setenv("M3_CODEX_ENV_KEY", "M3_FAKE_MODEL_KEY")
        env.setenv("M3_FAKE_MODEL_KEY", FAKE_API_KEY)
        tmp = tmp_path_factory.mktemp("scenarios")
        config = write_config(tmp / "server.toml", tmp / "m3.sqlite", pool_size=8)
        ca = None
        if request.param == "tls+token":
            authority = Authority.create(tmp / "pki")
            pair, ca = authority.server(), authority.cert
            config.write_text(
                config.read_text()
                + f'[tls]\ncert = "{pair.cert}"\nkey = "{pair.key}"\n'
                + f'[[auth.tokens]]\nprincipal = "scenarios"\nhash = "{token_hash(TOKEN)}"\n'
            )
        process = ServerProcess(config, tmp / "server.log").start()
        try:
            yield Service(process, ca)
        finally:
            process.terminate()


@pytest.mark.parametrize("language", ["python", "typescript", "go"])
def test_language_passes_every_scenario(server: Service, language: str) -> None:
    command, cwd = _driver(language, server.arguments())
    # The TypeScript driver rebuilds clients/typescript/dist, then runs from it.
    building = exclusive(TYPESCRIPT_DIST) if language == "typescript" else contextlib.nullcontext()
    with building:
        completed = subprocess.run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT), **server.environment()},
        )
    output = completed.stdout + completed.stderr
    failures = [line for line in output.splitlines() if line.startswith("FAIL ")]
    assert completed.returncode == 0 and not failures, "\n".join(failures) or output[-4000:]
    summary = [line for line in completed.stdout.splitlines() if line.startswith(f"{language}: ")]
    # Every scenario in the file ran and passed (none silently skipped).
    count = len(json.loads(SCENARIOS.read_text())["scenarios"])
    assert summary == [f"{language}: {count} passed, 0 failed"], output[-4000:]
