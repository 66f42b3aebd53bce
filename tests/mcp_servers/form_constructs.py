"""Test MCP server "forms": one tool per form-schema construct of form_constructs.json.

Run `python tests/mcp_servers/form_constructs.py` (stdio, legacy elicitation). Tool
`ask_<name>` sends the construct's schema exactly as the JSON file has it, with the
message `construct <name>`, and returns what came back as sorted JSON:
`{"action": ..., "content": ...}`. The request key is the construct's name
(`_meta["m3/request_key"]`), so a test can tell the rounds apart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as t
from _serve import Variant, main
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.message import ServerMessageMetadata

CONSTRUCTS: list[dict[str, Any]] = json.loads(
    Path(__file__).with_name("form_constructs.json").read_text(encoding="utf-8")
)["constructs"]


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("forms", log_level="WARNING")
    for construct in CONSTRUCTS:
        add_tool(server, construct["name"], construct["schema"])
    return server


def add_tool(server: MCPServer[Any], name: str, schema: dict[str, Any]) -> None:
    async def ask(ctx: Context) -> str:
        request = t.ElicitRequest(
            params=t.ElicitRequestFormParams(
                message=f"construct {name}",
                requested_schema=schema,
                _meta={"m3/request_key": name},
            )
        )
        answer = await ctx.request_context.session.send_request(
            request,
            t.ElicitResult,
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
        )
        return json.dumps({"action": answer.action, "content": answer.content}, sort_keys=True)

    server.tool(name=f"ask_{name}", description=f"Asks with a form using {name}.")(ask)


if __name__ == "__main__":
    main(build)
