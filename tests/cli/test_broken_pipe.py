"""Every `m3grpc` command whose reader goes away (`m3grpc pending ID | head -1`)
stops quietly with exit status 141 (128 + SIGPIPE), where it printed a
BrokenPipeError traceback. The pipe's reading end is closed before the command
starts, so its first write fails, every time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.api.conftest import ROOT
from tests.cli.conftest import Cli


def closed_stdout(command: list[str]) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            command, cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True, timeout=300
        )
    finally:
        os.close(write)


def test_a_closed_stdout_ends_every_command_quietly(cli: Cli, tmp_path: Path) -> None:
    execution_id = cli.submit("shipping", "book_shipment")
    cli.wait_pending(execution_id)
    config = tmp_path / "m3.toml"
    config.write_text(f'database = "{tmp_path / "m3.sqlite"}"\n')
    m3grpc = [sys.executable, "-m", "m3grpc"]
    for command in (
        cli.command("pending", execution_id),
        cli.command("pending", execution_id, "--json"),
        cli.command("status", execution_id),
        cli.command("rounds", "list", "--execution", execution_id),
        cli.command("watch", "--execution", execution_id),
        [*m3grpc, "check-config", str(config)],
        [*m3grpc, "db", "status", "--config", str(config)],
    ):
        done = closed_stdout(command)
        assert (done.returncode, done.stderr) == (141, ""), (command, done.stderr)
    # argparse drops its help text itself when stdout is gone.
    assert closed_stdout([*m3grpc, "--help"]).stderr == ""
    cli.ok("cancel", execution_id)
