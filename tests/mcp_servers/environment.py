"""Test MCP server "environment": tells what its process was started with.

    python tests/mcp_servers/environment.py

- tool `describe_process(note)`: returns a JSON text
  `{"environ": {...}, "argv": [...], "cwd": "..."}` with this process's whole
  environment, command line and working directory. `note` is whatever the
  caller sends (a test puts a canary in it, to show it never reaches them).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer


def build() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("environment", log_level="WARNING")

    @server.tool()
    async def describe_process(note: str = "") -> str:
        return json.dumps({"environ": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd()})

    return server


if __name__ == "__main__":
    build().run("stdio")
