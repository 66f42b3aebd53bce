"""A tiny MCP server for the demo: `book_shipment` asks the user for the address.

Run over stdio: `python examples/shipping_server.py` (M3 launches it for you).

The address form is sent without a top-level `title` (the SDK's `ctx.elicit`
would send the model's name as one): Codex 0.171 refuses a titled form schema
and answers `cancel` itself, so an agent run through Codex would never see the
question. The `m3/request_key` in `_meta` keeps M3's request key
`shipping_address` (otherwise derived from that title).
"""

from __future__ import annotations

from typing import Any

import mcp_types as t
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel

server: MCPServer = MCPServer("shipping", log_level="WARNING")


class ShippingAddress(BaseModel):
    street: str
    city: str


def address_schema() -> dict[str, Any]:
    schema = render_elicitation_schema(ShippingAddress)
    schema.pop("title", None)
    return schema


@server.tool()
async def book_shipment(ctx: Context) -> str:
    """Book a shipment after asking where it goes."""
    request = t.ElicitRequest(
        params=t.ElicitRequestFormParams(
            message="Where should the shipment go?",
            requested_schema=address_schema(),
            _meta={"m3/request_key": "shipping_address"},
        )
    )
    answer = await ctx.request_context.session.send_request(
        request,
        t.ElicitResult,
        metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
    )
    if answer.action == "accept":
        address = ShippingAddress.model_validate(answer.content)
        return f"booked shipment to {address.street}, {address.city}"
    return f"shipment not booked: {answer.action}"


if __name__ == "__main__":
    server.run("stdio")
