"""Fixtures of the agent harness tests: the installed Codex binary, a fake model, and an
embedded kit whose `codex` harness runs that binary against the fake model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from m3grpc import MCPTestKit
from m3grpc.devtools.fake_model import FAKE_API_KEY, FakeModel
from m3grpc.harness.codex import CodexHarness, CodexSettings
from m3grpc.storage import SQLiteExecutionStore
from tests.support.codex import KEY_VAR, codex_binary


@pytest.fixture(scope="session")
def codex_bin() -> str:
    return codex_binary()


@pytest.fixture
def model() -> Iterator[FakeModel]:
    with FakeModel() as fake:
        yield fake


@pytest.fixture
def settings(codex_bin: str, model: FakeModel) -> CodexSettings:
    return CodexSettings(
        binary=codex_bin, base_url=model.base_url, env_key=KEY_VAR, env={KEY_VAR: FAKE_API_KEY}
    )


@pytest.fixture
def codex_kit(tmp_path: Path, settings: CodexSettings) -> Iterator[MCPTestKit]:
    store = SQLiteExecutionStore(tmp_path / "executions.sqlite")
    try:
        with MCPTestKit(
            store=store, env={}, poll_interval=0.2, harnesses={"codex": CodexHarness(settings)}
        ) as kit:
            yield kit
    finally:
        store.close()
