"""Test MCP server "booking", written the way the MCP Python SDK's documentation writes one:
a pydantic model for the form, and nothing M3-specific.

Run `python tests/mcp_servers/booking.py --variant legacy|mrtr [--http --port N]` (see
`_serve.py`). Tool `book_table` asks for a `TableBooking`: a model with a docstring (the SDK
sends it as the schema's top-level `description`, and the model's name as its `title`) and
a string, an enum, a boolean with a default, an integer with bounds and an optional string.
The request key is `table_booking` in both variants: legacy derives it from the title,
2026-07-28 from the resolver's name.

- legacy: `await ctx.elicit(message, TableBooking)`;
- mrtr: a `Resolve(table_booking)` parameter whose resolver returns `Elicit(...)`.

Accept -> "booked a table for 4 (outdoor, high chair) under Ada; note: window";
decline/cancel -> "no booking: declined|cancelled".
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from _serve import Variant, main
from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel, Field

MESSAGE = "How should the table be booked?"
OUTCOME_WORDS = {"decline": "declined", "cancel": "cancelled"}


class TableBooking(BaseModel):
    """The table to book."""

    name: str = Field(description="Name for the booking")
    seating: Literal["indoor", "outdoor"]
    high_chair: bool = False
    guests: int = Field(ge=1, le=12)
    note: str | None = None


def booked(result: ElicitationResult[TableBooking]) -> str:
    if not isinstance(result, AcceptedElicitation):
        return f"no booking: {OUTCOME_WORDS[result.action]}"
    booking = result.data
    chair = ", high chair" if booking.high_chair else ""
    return (
        f"booked a table for {booking.guests} ({booking.seating}{chair}) "
        f"under {booking.name}; note: {booking.note or '-'}"
    )


def table_booking() -> Elicit[TableBooking]:
    return Elicit(MESSAGE, TableBooking)


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "booking", log_level="WARNING", request_state_security=security
    )
    if variant == "legacy":

        @server.tool()
        async def book_table(ctx: Context) -> str:
            """Book a table after asking for the details."""
            return booked(await ctx.elicit(MESSAGE, TableBooking))

    else:

        @server.tool()
        async def book_table(
            booking: Annotated[ElicitationResult[TableBooking], Resolve(table_booking)],
        ) -> str:
            """Book a table after asking for the details."""
            return booked(booking)

    return server


if __name__ == "__main__":
    main(build)
