"""The remote CLI verbs against a real `m3grpc serve` subprocess (SQLite in a tmp
directory, the test MCP servers bound over stdio), run as `python -m m3grpc ...`
subprocesses the way a person or a script runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import ROOT, SERVERS, ServerProcess, write_config


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def error(self) -> str:
        """The one `m3grpc: REASON: message` line (stderr may also hold notes)."""
        found = [line for line in self.stderr.splitlines() if line.startswith("m3grpc: ")]
        assert len(found) == 1, self.stderr
        return found[0]


def write_cli_config(tmp: Path) -> Path:
    """The black-box tests' bindings plus `order` (tests/mcp_servers/order_form.py)
    and `payment` (URL mode, tests/mcp_servers/payment.py)."""
    path = write_config(tmp / "server.toml", tmp / "m3.sqlite")
    with path.open("a") as config:
        for name, script in (("order", "order_form.py"), ("payment", "payment.py")):
            config.write(
                f"[servers.{name}]\n"
                f"command = {json.dumps(sys.executable)}\n"
                f"args = {json.dumps([str(SERVERS / script)])}\n"
            )
    return path


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("cli")
    server = ServerProcess(write_cli_config(tmp), tmp / "server.log").start()
    try:
        yield server
    finally:
        server.terminate()


class Cli:
    """`python -m m3grpc VERB ... --server ADDRESS`."""

    def __init__(self, address: str) -> None:
        self.address = address

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "m3grpc", *args, "--server", self.address]

    def __call__(self, *args: str, stdin: str | None = None, timeout: float = 300) -> Run:
        done = subprocess.run(
            self.command(*args),
            cwd=ROOT,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    def ok(self, *args: str, stdin: str | None = None) -> Run:
        run = self(*args, stdin=stdin)
        assert run.code == 0, f"{args}: exit {run.code}\n{run.stdout}\n{run.stderr}"
        return run

    def submit(self, binding: str, tool: str, *extra: str) -> str:
        run = self.ok(
            "submit",
            "--binding",
            binding,
            "--tool",
            f"{binding}:{tool}",
            "--prompt",
            f"Call {tool}.",
            "--human-input",
            "managed",
            "--json",
            *extra,
        )
        execution_id: str = run.json()["execution_id"]
        return execution_id

    def wait_pending(self, execution_id: str) -> dict[str, Any]:
        pending: dict[str, Any] = self.ok("pending", execution_id, "--wait", "180", "--json").json()
        return pending


@pytest.fixture
def cli(service: ServerProcess) -> Cli:
    return Cli(service.address)


def lines(text: str) -> Sequence[str]:
    return [line for line in text.splitlines() if line.strip()]
