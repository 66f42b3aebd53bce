"""The README's CLI reference is the CLI's: the exit-code table is the one
m3grpc/cli_remote/exits.py documents, the default address the service's. (The
README's code blocks, the CLI session included, run in tests/docs/test_snippets.py.)"""

from __future__ import annotations

import re

from m3grpc.cli_remote import exits, parser
from tests.api.conftest import ROOT

README = (ROOT / "README.md").read_text()


def _section(heading: str) -> str:
    return README.split(heading, 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]


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


def test_watch_kinds_are_the_clients_event_kinds() -> None:
    from m3grpc.wire.events import WATCH_EVENT_CLASSES

    assert tuple(WATCH_EVENT_CLASSES) == parser.WATCH_KINDS
