"""Test MCP server "order_form": one form of every field type MCP allows.

Run `python tests/mcp_servers/order_form.py [--http --port N]` (see `_serve.py`;
legacy elicitation only). Tool `place_order` asks for an `Order` (request key
`order`): a required string with a description, an integer with a default and a
minimum, a required number, a boolean with a default, an enum with a default,
an optional string. Accept -> "ordered 3 x Widget (2.5 kg, express, blue,
note: -)"; decline/cancel -> "no order: declined|cancelled".
"""

from __future__ import annotations

from typing import Any, Literal

from _serve import Variant, main
from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel, Field

OUTCOME_WORDS = {"decline": "declined", "cancel": "cancelled"}


class Order(BaseModel):
    item: str = Field(description="What to order")
    quantity: int = Field(default=1, ge=1)
    weight_kg: float
    express: bool = False
    color: Literal["red", "green", "blue"] = "green"
    note: str | None = None


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "order_form", log_level="WARNING", request_state_security=security
    )

    @server.tool()
    async def place_order(ctx: Context) -> str:
        result = await ctx.elicit("What should be ordered?", Order)
        if not isinstance(result, AcceptedElicitation):
            return f"no order: {OUTCOME_WORDS[result.action]}"
        order = result.data
        speed = "express" if order.express else "standard"
        return (
            f"ordered {order.quantity} x {order.item} "
            f"({order.weight_kg} kg, {speed}, {order.color}, note: {order.note or '-'})"
        )

    return server


if __name__ == "__main__":
    main(build)
