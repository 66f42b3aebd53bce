"""`m3grpc respond --interactive` driven like a person at a terminal: the CLI runs in
a tmux session (its own server socket), the test types with send-keys and reads
the prompts with capture-pane, then checks what the execution did with the answer."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import ROOT
from tests.cli.conftest import Cli


class Terminal:
    """One tmux session on a private tmux server (`tmux -L NAME`)."""

    def __init__(self, command: str) -> None:
        self.socket = f"m3cli-{uuid.uuid4().hex[:12]}"
        self._tmux("new-session", "-d", "-s", "cli", "-x", "160", "-y", "50", command, check=True)

    def _tmux(self, *args: str, check: bool = False) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=check,
        )
        return done.stdout

    def type(self, text: str) -> None:
        """Type `text` (literally) and press Enter."""
        if text:
            self._tmux("send-keys", "-t", "cli", "-l", text, check=True)
        self._tmux("send-keys", "-t", "cli", "Enter", check=True)

    def screen(self) -> str:
        # Trailing blanks are trimmed: wait for prompts without their final space.
        return self._tmux("capture-pane", "-p", "-J", "-t", "cli", "-S", "-")

    def wait_for(self, text: str, count: int = 1, attempts: int = 1200) -> str:
        """The screen once `text` shows at least `count` times (bounded polling)."""
        for _ in range(attempts):
            screen = self.screen()
            if screen.count(text) >= count:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} (x{count}) never showed; the screen:\n{self.screen()}")

    def close(self) -> None:
        self._tmux("kill-server")


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    try:
        yield opened
    finally:
        for terminal in opened:
            terminal.close()


def _respond_command(cli: Cli, execution_id: str, status_file: Path) -> str:
    argv = cli.command("respond", "--execution", execution_id, "--interactive")
    environment = f"PYTHONPATH={shlex.quote(os.environ.get('PYTHONPATH', str(ROOT)))}"
    run = " ".join(shlex.quote(arg) for arg in argv)
    # The pane stays open after the CLI exits, so its last lines can be read.
    return (
        f"cd {shlex.quote(str(ROOT))} && env {environment} {run}; "
        f'echo "exit status $?" | tee {shlex.quote(str(status_file))}; sleep 600'
    )


def test_a_person_answers_the_form_field_by_field(
    cli: Cli, tmp_path: Path, terminals: list[Terminal]
) -> None:
    assert sys.platform != "win32"
    execution_id = cli.submit("order", "place_order")
    round_id = cli.wait_pending(execution_id)["round_id"]

    # First a person who changes their mind: nothing is sent.
    first = Terminal(_respond_command(cli, execution_id, tmp_path / "first"))
    terminals.append(first)
    first.wait_for("Action: [a]ccept, [d]ecline or [c]ancel? [accept]:")
    first.type("maybe")
    first.wait_for("! answer accept, decline or cancel")
    first.type("d")
    screen = first.wait_for("Send it? [Y/n]:")
    assert "order: decline" in screen
    first.type("n")
    screen = first.wait_for("exit status ")
    assert "exit status 130" in screen
    assert "m3grpc: interrupted; nothing more was sent" in screen
    assert cli.ok("rounds", "get", round_id, "--json").json()["status"] == "pending"

    # Then the answer, typed field by field, with mistakes corrected on the way.
    terminal = Terminal(_respond_command(cli, execution_id, tmp_path / "second"))
    terminals.append(terminal)
    screen = terminal.wait_for("Action: [a]ccept, [d]ecline or [c]ancel? [accept]:")
    assert "Request 1 of 1: order (form)" in screen
    assert "What should be ordered?" in screen
    terminal.type("")  # the default: accept

    # Required fields first (in the schema's `required` order), then the rest by name.
    screen = terminal.wait_for("  item:")
    assert "item (Item): string, required" in screen
    assert "What to order" in screen
    terminal.type("")  # required: asked again
    terminal.wait_for("! required")
    terminal.type("Widget")

    terminal.wait_for("  weight_kg:")
    terminal.type("heavy")
    terminal.wait_for("! must be a number")
    terminal.type("2.5")

    screen = terminal.wait_for("  color [green]:")
    assert "1) red" in screen and "2) green" in screen and "3) blue" in screen
    terminal.type("purple")
    terminal.wait_for("! choose one of red, green, blue (or its number)")
    terminal.type("3")

    terminal.wait_for("  express [y/n] [no]:")
    terminal.type("")  # the default: no

    terminal.wait_for("  note [empty: leave out]:")
    terminal.type("")

    screen = terminal.wait_for("  quantity [1]:")
    assert "integer, optional, >= 1, default 1" in screen
    terminal.type("three")
    terminal.wait_for("! must be a whole number")
    terminal.type("0")
    terminal.wait_for("! must be >= 1")
    terminal.type("3")

    screen = terminal.wait_for("Send it? [Y/n]:")
    assert (
        'order: accept {"item": "Widget", "weight_kg": 2.5, "color": "blue", '
        '"express": false, "quantity": 3}'
    ) in screen
    terminal.type("y")

    screen = terminal.wait_for("exit status ")
    assert "exit status 0" in screen, screen
    assert f"round {round_id}: response_validated" in screen
    assert "idempotency key: cli-" in screen

    result = cli.ok("result", execution_id, "--wait", "180", "--json").json()
    assert result["outcome"] == "succeeded"
    text = result["operations"][0]["result"]["content"][0]["text"]
    assert text == "ordered 3 x Widget (2.5 kg, standard, blue, note: -)"
