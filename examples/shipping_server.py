"""A tiny MCP server for the demo: `book_shipment` asks the user for the address.

Run over stdio: `python examples/shipping_server.py` (M3 launches it for you).

Written the way the MCP Python SDK's documentation writes a server: the form is
a pydantic model passed to `ctx.elicit`. The SDK sends the model's name as the
schema's `title`, and M3 names the request after it: `ShippingAddress` becomes
the request key `shipping_address` (docs: "Request keys").
"""

from __future__ import annotations

from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

server: MCPServer = MCPServer("shipping", log_level="WARNING")


class ShippingAddress(BaseModel):
    street: str
    city: str


@server.tool()
async def book_shipment(ctx: Context) -> str:
    """Book a shipment after asking where it goes."""
    answer = await ctx.elicit("Where should the shipment go?", ShippingAddress)
    if isinstance(answer, AcceptedElicitation):
        return f"booked shipment to {answer.data.street}, {answer.data.city}"
    return f"shipment not booked: {answer.action}"


if __name__ == "__main__":
    server.run("stdio")
