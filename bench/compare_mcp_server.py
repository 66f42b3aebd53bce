"""The MCP server of bench/compare.py: one Streamable HTTP server on loopback, shared by
every M3 execution of the run (the SDK's `MCPServer`).

    python bench/compare_mcp_server.py --port N [--tools-ttl-ms MS] [--request-state-ttl S]

Two tools, each asking once for a `ShippingAddress` (request key `shipping_address`) and
then running `compare_common.after_pause`, which stamps the result text with the
monotonic time at which the tool's code after the pause ran:

- `book_legacy`: `ctx.elicit(...)` mid-call (legacy `elicitation/create`; bind it with
  protocol "legacy");
- `book_mrtr`: a `Resolve(...)` resolver (2026-07-28 multi round-trip: the call returns an
  `InputRequiredResult`, the retry with the answer runs the tool body).

Its tool list never changes, so, as such a server would, it marks its 2026-07-28
`tools/list` results fresh for a minute (`ttlMs`; `--tools-ttl-ms 0` for no hint).
"""

from __future__ import annotations

import argparse
from typing import Annotated, Any

from compare_common import QUESTION, after_pause
from mcp.server import CacheHint
from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel

TOOLS_TTL_MS = 60_000


class ShippingAddress(BaseModel):
    street: str
    city: str


def shipping_address() -> Elicit[ShippingAddress]:
    return Elicit(QUESTION, ShippingAddress)


def finish(result: ElicitationResult[ShippingAddress]) -> str:
    if isinstance(result, AcceptedElicitation):
        text, _ = after_pause(result.data.model_dump())
        return text
    return f"shipment not booked: {result.action}"


def build(
    tools_ttl_ms: int = TOOLS_TTL_MS, request_state_ttl: float | None = None
) -> MCPServer[Any]:
    hints = {"tools/list": CacheHint(ttl_ms=tools_ttl_ms)} if tools_ttl_ms else None
    # The SDK's sealed requestState expires after 600 s by default: a round answered
    # later is refused (`request_state_rejected`), as a person may well answer later.
    security = (
        None if request_state_ttl is None else RequestStateSecurity.ephemeral(ttl=request_state_ttl)
    )
    server: MCPServer[Any] = MCPServer(
        "bench", log_level="WARNING", cache_hints=hints, request_state_security=security
    )

    @server.tool()
    async def book_legacy(ctx: Context) -> str:
        return finish(await ctx.elicit(QUESTION, ShippingAddress))

    @server.tool()
    async def book_mrtr(
        address: Annotated[ElicitationResult[ShippingAddress], Resolve(shipping_address)],
    ) -> str:
        return finish(address)

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tools-ttl-ms", type=int, default=TOOLS_TTL_MS)
    parser.add_argument(
        "--request-state-ttl", type=float, default=None, help="seconds (the SDK's: 600)"
    )
    args = parser.parse_args()
    server = build(args.tools_ttl_ms, args.request_state_ttl)
    server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
