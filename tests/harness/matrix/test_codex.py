"""The harness matrix (cells.py) with the `codex` harness."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.matrix.agents import AGENTS, Agent
from tests.harness.matrix.scenarios import *  # noqa: F403  (the matrix's scenarios, run here)


@pytest.fixture
def agent() -> Iterator[Agent]:
    with AGENTS["codex"]() as agent:
        yield agent
