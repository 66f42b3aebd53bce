"""The harness pages generated from the tests (scripts/gen-harness-docs.py) are current: the
harness matrix (docs/guides/harnesses/matrix.md, from tests/harness/matrix/cells.py) and the
Codex form-construct table (docs/guides/harnesses/codex.md, from
tests/mcp_servers/form_constructs.json)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_harness_pages_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-harness-docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_matrix_has_a_cell_per_harness_scenario_and_generation() -> None:
    from tests.harness.matrix.cells import HARNESSES, SCENARIOS

    page = (ROOT / "docs" / "guides" / "harnesses" / "matrix.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + sum(len(s.generations) for s in SCENARIOS)
    assert all(row.count(" | ") == 1 + len(HARNESSES) for row in rows)
