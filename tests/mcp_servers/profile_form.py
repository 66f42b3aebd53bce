"""Test MCP server "profile_form": a form using MCP's string formats, patterns,
lengths, titled choices and a multi-select (the web inbox's browser tests).

Run `python tests/mcp_servers/profile_form.py [--http --port N]` (see `_serve.py`;
legacy elicitation only). Tool `edit_profile` sends one form (request key
`profile`), its schema written out by hand (the SDK's models do not render
`oneOf` titles or string arrays): a required email, a required handle matching
a pattern, an optional date, a plan from titled choices (default "free"), topics
(at least one of three), and a bio of at most 20 characters. Accept -> "profile:
<the content as sorted JSON>"; decline/cancel -> "no profile: <action>".
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as t
from _serve import Variant, main
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.message import ServerMessageMetadata

PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Email"},
        "handle": {
            "type": "string",
            "title": "Handle",
            "description": "3-16 lower-case letters, digits or _",
            "pattern": "^[a-z][a-z0-9_]{2,15}$",
        },
        "birthday": {"type": "string", "format": "date", "title": "Birthday"},
        "plan": {
            "type": "string",
            "title": "Plan",
            "oneOf": [{"const": "free", "title": "Free"}, {"const": "pro", "title": "Pro"}],
            "default": "free",
        },
        "topics": {
            "type": "array",
            "title": "Topics",
            "items": {"type": "string", "enum": ["news", "releases", "security"]},
            "minItems": 1,
        },
        "bio": {"type": "string", "title": "Bio", "maxLength": 20},
    },
    "required": ["email", "handle", "topics"],
}


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "profile_form", log_level="WARNING", request_state_security=security
    )

    @server.tool()
    async def edit_profile(ctx: Context) -> str:
        request = t.ElicitRequest(
            params=t.ElicitRequestFormParams(
                message="Fill in your profile.",
                requested_schema=PROFILE_SCHEMA,
                _meta={"m3/request_key": "profile"},
            )
        )
        answer = await ctx.request_context.session.send_request(
            request,
            t.ElicitResult,
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
        )
        if answer.action == "accept":
            return "profile: " + json.dumps(answer.content, sort_keys=True)
        return f"no profile: {answer.action}"

    return server


if __name__ == "__main__":
    main(build)
