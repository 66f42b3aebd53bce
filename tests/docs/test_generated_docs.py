"""The documentation derived from code is current: docs/configuration.md (from the
config model), docs/reference/grpc-api.md (from the protos' comments) and the round
state diagram of docs/how-it-works/state-machine.md (from ROUND_RULES), as
scripts/gen-docs.py writes them. A stale file fails with the command that fixes it.
And the README's links into the site lead to pages that exist (the site's own links
are checked by `mkdocs build --strict` in scripts/test.sh; the README is not part of
the site)."""

from __future__ import annotations

import importlib.util
import re
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
    assert diagram in (ROOT / "docs" / "how-it-works" / "state-machine.md").read_text()
    for rule in ROUND_RULES:
        if rule.to_state is None:
            assert f"`{rule.method}`" in diagram
            continue
        for source in rule.from_states:
            start = "[*]" if source is None else source.value
            edge = f"    {start} --> {rule.to_state.value}: "
            [line] = [line for line in diagram.splitlines() if line.startswith(edge)]
            assert rule.method in line.removeprefix(edge).split(" / ")


def test_a_stale_diagram_is_replaced() -> None:
    generator = _generator()
    old = "a\n" + generator.BEGIN + "old\n" + generator.END + "b\n"
    assert generator.with_diagram(old) == "a\n" + generator.round_diagram() + "b\n"


def test_the_grpc_reference_has_every_element_and_its_comment() -> None:
    from m3grpc.wire.gen.m3.v1 import (
        elicitation_pb2,
        elicitation_service_pb2,
        error_reason_pb2,
        execution_pb2,
        execution_service_pb2,
    )

    page = (ROOT / "docs" / "reference" / "grpc-api.md").read_text()
    files = (execution_service_pb2, elicitation_service_pb2, execution_pb2, elicitation_pb2)
    for file in (*files, error_reason_pb2):
        for service in file.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                assert f"{{#{service.name}.{method.name}}}" in page, method.full_name
        for message in file.DESCRIPTOR.message_types_by_name.values():
            assert f"### {message.name} {{#{message.name}}}" in page, message.name
            for field in message.fields:
                assert f"- **`{field.name}`** " in page, field.full_name
        for enum in file.DESCRIPTOR.enum_types_by_name.values():
            for value in enum.values:
                assert f"- **`{value.name}`** = {value.number}" in page, value.name
    # The comments come along: a method's, an enum value's.
    assert "Waits (long-polls) until the execution finishes" in page
    assert 'Wire reason: "MANAGED_INPUT_INVALID"' in page


def test_the_readme_links_lead_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local)
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing
