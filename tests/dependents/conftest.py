"""The clients as another project uses them, against one live `m3grpc serve`
(SQLite in a tmp directory, the test MCP servers bound over stdio)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import ServerProcess, running, start_server


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from running(start_server(tmp_path_factory.mktemp("clients")))
