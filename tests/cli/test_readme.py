"""The README's remote snippets run as written against a live service: the Python
remote client's program answers the round end to end, and the CLI session's
shell lines do the same through the `m3grpc` command. The exit-code table of the
README is the one the CLI documents (m3grpc/cli_remote/exits.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from m3grpc.cli_remote import exits, parser
from tests.api.conftest import BOOKED, ROOT, ServerProcess

README = (ROOT / "README.md").read_text()


def _section(heading: str) -> str:
    return README.split(heading, 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]


def _block(section: str, language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", section, re.DOTALL)
    assert found is not None, f"no {language} block"
    return found.group(1)


def _environment(service: ServerProcess, tmp_path: Path) -> dict[str, str]:
    # `m3grpc` on PATH runs this checkout (the console script of an editable install
    # would too; a wrapper does not depend on how the checkout was installed).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "m3grpc"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m m3grpc "$@"\n')
    wrapper.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "M3_SERVER": service.address,
    }


def test_the_remote_python_snippet_answers_the_round(
    service: ServerProcess, tmp_path: Path
) -> None:
    program = _block(_section("### Python remote client"), "python")
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=_environment(service, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Where should the shipment go?",
        f"response_validated succeeded {BOOKED}",
    ]


def test_the_cli_session_runs_as_written(service: ServerProcess, tmp_path: Path) -> None:
    session = _block(_section("### The command line: remote verbs"), "bash")
    # As written, except that the service listens where the test started it.
    session = session.replace("export M3_SERVER=127.0.0.1:50051", ": the address is set")
    done = subprocess.run(
        ["bash", "-e", "-c", session],
        cwd=tmp_path,
        env=_environment(service, tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "request shipping_address (form): Where should the shipment go?" in done.stdout
    assert "response_validated" in done.stdout
    assert "outcome    succeeded" in done.stdout
    assert BOOKED in done.stdout
    assert "resolved" in done.stdout  # rounds list


def test_the_exit_code_table_is_the_documented_one() -> None:
    def rows(text: str) -> list[str]:
        return [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]

    documented = rows(exits.__doc__ or "")
    assert documented, "exits.py documents no exit codes"
    assert rows(_section("### The command line: remote verbs")) == documented
    codes = {int(line.split("|")[1]) for line in documented}
    constants = {
        value
        for name, value in vars(exits).items()
        if name.isupper() and not name.startswith("_") and isinstance(value, int)
    }
    assert codes == constants


def test_the_default_address_is_the_service_default() -> None:
    from m3grpc.api.config import DEFAULT_LISTEN

    assert parser.DEFAULT_SERVER == DEFAULT_LISTEN
