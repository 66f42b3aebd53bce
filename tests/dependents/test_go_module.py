"""The Go client as another module depends on it: the README's "Use it from another
module" lines run as written in an empty directory (a new module, a `replace` of the
client's path by this checkout's clients/go, `go mod tidy`, the quickstart program of
its "Example", examples/quickstart/main.go, which readme_test.go keeps equal to the
README's block), and the program answers a round of a live service. The README's
"Errors" fragment compiles in that module too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.api.conftest import BOOKED, ROOT, ServerProcess

README = ROOT / "clients" / "go" / "README.md"
GO = shutil.which("go") or "go"


def _section(heading: str) -> str:
    text = README.read_text()
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)


def test_a_fresh_module_uses_the_client_as_the_readme_says(
    service: ServerProcess, tmp_path: Path
) -> None:
    [lines] = _blocks(_section("Use it from another module"), "bash")
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    environment = {**os.environ, "M3_REPO": str(ROOT), "M3_SERVER": service.address}
    done = subprocess.run(
        ["bash", "-e", "-c", lines],
        cwd=consumer,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.startswith("EXECUTION_OUTCOME_SUCCEEDED "), done.stdout
    assert BOOKED in done.stdout
    assert "=> " + str(ROOT / "clients" / "go") in (consumer / "go.mod").read_text()

    # The "Errors" fragment, as the body of a function of that module: it compiles
    # against the client's exported names (it needs a failed call to do anything).
    [fragment] = _blocks(_section("Errors"), "go")
    (consumer / "explain.go").write_text(
        "package main\n\n"
        'import (\n\t"errors"\n\t"fmt"\n\n\t"github.com/m3grpc/m3grpc/clients/go/m3"\n)\n\n'
        "func explain(err error) {\n" + fragment + "}\n\nvar _ = explain\n"
    )
    vetted = subprocess.run(
        [GO, "vet", "."], cwd=consumer, env=environment, capture_output=True, text=True, timeout=600
    )
    assert vetted.returncode == 0, vetted.stderr
