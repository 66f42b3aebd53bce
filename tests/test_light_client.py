"""`import m3grpc` and `import m3grpc.client` stay light: none of the server's
packages or dependencies get loaded (each check runs in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEAVY = (
    "sqlalchemy",
    "mcp",
    "mcp_types",
    "jsonschema",
    "anyio",
    "m3grpc.runtime",
    "m3grpc.storage",
    "m3grpc.harness",
    "m3grpc.kit",
    "m3grpc.api",
)


def _loaded_after(code: str) -> list[str]:
    """The HEAVY modules loaded after running `code` in a fresh interpreter."""
    probe = (
        f"import json, sys\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_import_client_loads_no_server_module() -> None:
    assert _loaded_after("import m3grpc.client") == []


def test_client_names_load_no_server_module() -> None:
    code = (
        "from m3grpc.client import AsyncRemoteMCPTestKit, RemoteCallError, RemoteMCPTestKit\n"
        "from m3grpc import ElicitationResponse, AgentSpec, StdioServer, ModelValidationError\n"
        "from m3grpc.wire import messages, status\n"
    )
    assert _loaded_after(code) == []


def test_import_package_root_loads_nothing_heavy() -> None:
    code = "import m3grpc\nassert 'pydantic' not in sys.modules and 'grpc' not in sys.modules"
    assert _loaded_after(code) == []


def test_embedded_api_is_still_exported_from_the_root() -> None:
    # The lazy exports load the embedded kit on first use.
    code = (
        "from m3grpc import MCPTestKit, AsyncMCPTestKit\n"
        "import m3grpc\n"
        "assert MCPTestKit is m3grpc.kit.MCPTestKit and 'MCPTestKit' in dir(m3grpc)\n"
        "assert all(hasattr(m3grpc, name) for name in m3grpc.__all__)\n"
    )
    loaded = _loaded_after(code)
    assert "m3grpc.kit" in loaded and "sqlalchemy" in loaded
