"""Test MCP server "crash_target": the server the crash campaign kills M3 around.

    python tests/mcp_servers/crash_target.py --http --port N

One Streamable HTTP process serves every execution of a campaign and outlives
the `m3grpc serve` processes the campaign kills. Both tools ask for a
`ShippingAddress` (key `shipping_address`); once the answer has reached this
server they create the file `marker` (so the campaign can SIGKILL M3 while the
answer is being delivered, before its round resolves), wait `hold` seconds,
then return "booked shipment to <street>, <city>" (decline/cancel: "shipment
not booked").

- tool `book_held(marker, hold)`: a legacy `elicitation/create` held open
  (`ctx.elicit`): its round fails closed when the M3 process holding it dies.
- tool `book_resumable(marker, hold)`: a 2026-07-28 `InputRequiredResult`
  sealed with a FIXED key (as tests/mcp_servers/ledger.py), so a round can be
  resumed by another M3 process, valid for a day (a round may wait that long).
- tool `quote()`: no input (the campaign's barrier for WatchPending).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import anyio
import mcp_types as t
from mcp.server.elicitation import AcceptedElicitation, render_elicitation_schema
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel

STATE_KEY = b"m3-test-crash-request-state-key!"


class ShippingAddress(BaseModel):
    street: str
    city: str


async def _delivered(marker: str, hold: float, address: ShippingAddress | None) -> str:
    Path(marker).touch()
    await anyio.sleep(hold)
    if address is None:
        return "shipment not booked"
    return f"booked shipment to {address.street}, {address.city}"


def build() -> MCPServer[Any]:
    # A day, not the SDK's 600 s: a round may stay paused through a whole campaign.
    security = RequestStateSecurity(keys=[STATE_KEY], ttl=86_400.0)
    server: MCPServer[Any] = MCPServer(
        "crash_target", log_level="WARNING", request_state_security=security
    )

    @server.tool()
    async def book_held(marker: str, hold: float, ctx: Context) -> str:
        result = await ctx.elicit("Where should the shipment go?", ShippingAddress)
        address = result.data if isinstance(result, AcceptedElicitation) else None
        return await _delivered(marker, hold, address)

    @server.tool()
    async def book_resumable(marker: str, hold: float, ctx: Context) -> str | t.InputRequiredResult:
        answer = (ctx.input_responses or {}).get("shipping_address")
        if ctx.request_state is None or not isinstance(answer, t.ElicitResult):
            params = t.ElicitRequestFormParams(
                message="Where should the shipment go?",
                requested_schema=render_elicitation_schema(ShippingAddress),
            )
            return t.InputRequiredResult(
                input_requests={"shipping_address": t.ElicitRequest(params=params)},
                request_state="asked",
            )
        address = None
        if answer.action == "accept":
            address = ShippingAddress.model_validate(answer.content)
        return await _delivered(marker, hold, address)

    @server.tool()
    async def quote() -> str:
        return "quote"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--http", action="store_true", help="accepted; HTTP is the only mode")
    args = parser.parse_args()
    build().run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
