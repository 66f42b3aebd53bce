"""The documented CLI is the CLI: the exit-code table of the command line's page
(docs/guides/cli.md) is the one m3grpc/cli_remote/exits.py documents, the default
address the service's, and the verbs the page lists are the parser's. (The code blocks,
the README's tour and the page's session included, run in tests/docs/test_snippets.py.)"""

from __future__ import annotations

import re

from m3grpc.cli_remote import exits, parser
from tests.api.conftest import ROOT

PAGE = (ROOT / "docs" / "guides" / "cli.md").read_text()


def _section(heading: str) -> str:
    return PAGE.split(heading + "\n", 1)[1].split("\n## ", 1)[0]


def test_the_exit_code_table_is_the_documented_one() -> None:
    def rows(text: str) -> list[str]:
        return [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]

    documented = rows(exits.__doc__ or "")
    assert documented, "exits.py documents no exit codes"
    assert rows(_section("## Exit codes")) == documented
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


def test_watch_kinds_are_the_clients_event_kinds() -> None:
    from m3grpc.wire.events import WATCH_EVENT_CLASSES

    assert tuple(WATCH_EVENT_CLASSES) == parser.WATCH_KINDS


def test_the_verb_table_lists_every_verb() -> None:
    import argparse

    commands = argparse.ArgumentParser().add_subparsers()
    parser.add_commands(commands)
    documented = {
        line.split("`")[1].split()[0]
        for line in _section("## The verbs").splitlines()
        if line.startswith("| `")
    }
    assert documented == set(commands.choices)
