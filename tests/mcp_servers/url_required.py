"""Test MCP server "url_required": URL elicitations demanded by a -32042 error.

Run `python tests/mcp_servers/url_required.py [--http --port N]` (see
`_serve.py`; the legacy variant only: the error exists up to 2025-11-25, so an
HTTP binding pins `protocol="legacy"`).

- tool `open_vault(vault="main")`: the first call fails with a
  URL-elicitation-required error (JSON-RPC -32042) listing one URL elicitation
  (elicitationId "vault-login"). The retry sends
  `notifications/elicitation/complete` for it, then returns "vault main opened".
- tool `sign_contract`: the first call lists two elicitations ("identity-check"
  and "signature"); the retry returns "contract signed" (no notification).
- tool `always_required`: every call fails with the error (one elicitation,
  "again").

A first call is remembered per tool for the life of the process.
"""

from __future__ import annotations

from typing import Any

import mcp_types as t
from _serve import Variant, main
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import UrlElicitationRequiredError

VAULT_URL = "https://vault.example.test/login"


def url(elicitation_id: str, message: str, target: str = VAULT_URL) -> t.ElicitRequestURLParams:
    return t.ElicitRequestURLParams(message=message, url=target, elicitation_id=elicitation_id)


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "url_required", log_level="WARNING", request_state_security=security
    )
    asked: set[str] = set()

    @server.tool()
    async def open_vault(ctx: Context, vault: str = "main") -> str:
        if "open_vault" not in asked:
            asked.add("open_vault")
            raise UrlElicitationRequiredError(
                [url("vault-login", "Log in to the vault in your browser")],
                "This vault requires browser login.",
            )
        await ctx.request_context.session.send_elicit_complete(
            "vault-login", related_request_id=ctx.request_id
        )
        return f"vault {vault} opened"

    @server.tool()
    async def sign_contract() -> str:
        if "sign_contract" not in asked:
            asked.add("sign_contract")
            raise UrlElicitationRequiredError(
                [
                    url("identity-check", "Prove who you are", "https://id.example.test/"),
                    url("signature", "Sign the contract", "https://sign.example.test/"),
                ]
            )
        return "contract signed"

    @server.tool()
    async def always_required() -> str:
        raise UrlElicitationRequiredError([url("again", "Log in again")])

    return server


if __name__ == "__main__":
    main(build)
