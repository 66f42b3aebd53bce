"""The matrix's embedded kit: the module's harness, on a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from m3grpc import MCPTestKit
from m3grpc.storage import SQLiteExecutionStore
from tests.harness.matrix.agents import Agent


@pytest.fixture
def kit(agent: Agent, tmp_path: Path) -> Iterator[MCPTestKit]:
    store = SQLiteExecutionStore(tmp_path / "executions.sqlite")
    try:
        with agent.kit(store) as kit:
            yield kit
    finally:
        store.close()
