"""Test MCP server "payment": URL-mode elicitation.

Run `python tests/mcp_servers/payment.py --variant legacy|mrtr [--http --port N]`
(see `_serve.py`). Tool `authorize_payment(amount=10.0)` sends the user to
https://pay.example.test/authorize and reports the consent:
"payment authorized" or "payment not authorized: decline|cancel".

legacy uses `ctx.elicit_url` (elicitation id "payment-authorization"); mrtr
returns a hand-built `InputRequiredResult` keyed "payment_authorization"
(2026-07-28 URL requests carry no elicitation id).
"""

from __future__ import annotations

from typing import Any

import mcp_types as t
from _serve import Variant, main
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity

URL = "https://pay.example.test/authorize"
MESSAGE = "Authorize the payment in your browser"


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "payment", log_level="WARNING", request_state_security=security
    )

    if variant == "legacy":

        @server.tool()
        async def authorize_payment(ctx: Context, amount: float = 10.0) -> str:
            result = await ctx.elicit_url(MESSAGE, URL, "payment-authorization")
            if result.action == "accept":
                return f"payment authorized: {amount}"
            return f"payment not authorized: {result.action}"

    else:

        @server.tool(name="authorize_payment")
        async def authorize_payment_mrtr(
            ctx: Context, amount: float = 10.0
        ) -> str | t.InputRequiredResult:
            answer = (ctx.input_responses or {}).get("payment_authorization")
            if not isinstance(answer, t.ElicitResult):
                params = t.ElicitRequestURLParams(message=MESSAGE, url=URL)
                return t.InputRequiredResult(
                    input_requests={"payment_authorization": t.ElicitRequest(params=params)},
                    request_state="authorize",
                )
            if answer.action == "accept":
                return f"payment authorized: {amount}"
            return f"payment not authorized: {answer.action}"

    return server


if __name__ == "__main__":
    main(build)
