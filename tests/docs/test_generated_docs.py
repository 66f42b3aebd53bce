"""The documentation derived from code is current: docs/configuration.md (from the
config model) and README.md's round state diagram (from ROUND_RULES), as
scripts/gen-docs.py writes them. A stale file fails with the command that fixes it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

from m3grpc.api.config import ServiceConfig
from m3grpc.storage.transitions import ROUND_RULES
from tests.api.conftest import ROOT

SCRIPT = ROOT / "scripts" / "gen-docs.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_docs_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_configuration_reference_names_every_key() -> None:
    reference = (ROOT / "docs" / "configuration.md").read_text()
    for name, field in ServiceConfig.model_fields.items():
        section = field.annotation
        if name == "servers":
            keys = ["command", "args", "env", "cwd", "url", "headers", "protocol", "roots"]
        elif isinstance(section, type) and hasattr(section, "model_fields"):
            assert f"## `[{name}]`" in reference
            keys = list(section.model_fields)
        else:
            keys = [name]
        for key in keys:
            assert f"| `{key}` |" in reference, key


def test_the_diagram_has_every_status_changing_rule() -> None:
    diagram = _generator().round_diagram()
    assert diagram in (ROOT / "README.md").read_text()
    for rule in ROUND_RULES:
        if rule.to_state is None:
            assert f"`{rule.method}`" in diagram
            continue
        for source in rule.from_states:
            start = "[*]" if source is None else source.value
            edge = f"    {start} --> {rule.to_state.value}: "
            [line] = [line for line in diagram.splitlines() if line.startswith(edge)]
            assert rule.method in line.removeprefix(edge).split(" / ")


def test_a_stale_reference_is_reported(tmp_path_factory: object) -> None:
    generator = _generator()
    assert generator.readme("a\n" + generator.BEGIN + "old\n" + generator.END + "b\n") == (
        "a\n" + generator.round_diagram() + "b\n"
    )
