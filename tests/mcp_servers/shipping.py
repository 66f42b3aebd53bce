"""Test MCP server "shipping": form-mode elicitation from tools, a prompt and a resource.

Run `python tests/mcp_servers/shipping.py --variant legacy|mrtr [--http --port N]`
(see `_serve.py`). Both variants expose the same names:

- tool `book_shipment`: asks for a `ShippingAddress` (key `shipping_address`);
  accept -> "booked shipment to <street>, <city>", decline/cancel ->
  "shipment not booked: declined|cancelled".
- tool `book_confirmed_shipment`: asks twice, the address then a `Confirmation`.
- tool `keep_asking`: asks again after every answer (exercises round limits).
- tool `quote(weight_kg=2.5)`: no input; "quote for 2.5 kg".
- prompt `shipping_label` and resource template `shipment://{shipment_id}/address`:
  ask for the address, then render it.

legacy uses `ctx.elicit`; mrtr uses `Resolve(...)` resolvers for the tools
(the SDK keys them `<module>:<resolver name>`) and hand-built
`InputRequiredResult`s keyed "shipping_address" for the prompt and resource,
which the SDK only supports that way.
"""

from __future__ import annotations

from typing import Annotated, Any

import mcp_types as t
from _serve import Variant, main
from mcp.server.elicitation import (
    AcceptedElicitation,
    ElicitationResult,
    render_elicitation_schema,
)
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel

OUTCOME_WORDS = {"decline": "declined", "cancel": "cancelled"}


class ShippingAddress(BaseModel):
    street: str
    city: str


class Confirmation(BaseModel):
    confirm: bool


class Answer(BaseModel):
    answer: str


def booked(result: ElicitationResult[ShippingAddress]) -> str:
    if isinstance(result, AcceptedElicitation):
        return f"booked shipment to {result.data.street}, {result.data.city}"
    return f"shipment not booked: {OUTCOME_WORDS[result.action]}"


def address_request() -> t.InputRequests:
    params = t.ElicitRequestFormParams(
        message="Where should the shipment go?",
        requested_schema=render_elicitation_schema(ShippingAddress),
    )
    return {"shipping_address": t.ElicitRequest(params=params)}


def answered_address(ctx: Context) -> str | None:
    """The address text from an MRTR retry, or None when it must be asked for."""
    answer = (ctx.input_responses or {}).get("shipping_address")
    if not isinstance(answer, t.ElicitResult):
        return None
    if answer.action != "accept":
        return f"no address: {OUTCOME_WORDS[answer.action]}"
    address = ShippingAddress.model_validate(answer.content)
    return f"{address.street}, {address.city}"


def add_legacy(server: MCPServer[Any]) -> None:

    @server.tool()
    async def book_shipment(ctx: Context) -> str:
        return booked(await ctx.elicit("Where should the shipment go?", ShippingAddress))

    @server.tool()
    async def book_confirmed_shipment(ctx: Context) -> str:
        address = await ctx.elicit("Where should the shipment go?", ShippingAddress)
        if not isinstance(address, AcceptedElicitation):
            return booked(address)
        confirmation = await ctx.elicit(f"Ship to {address.data.city}?", Confirmation)
        if isinstance(confirmation, AcceptedElicitation) and confirmation.data.confirm:
            return booked(address)
        return "shipment not booked: not confirmed"

    @server.tool()
    async def keep_asking(ctx: Context) -> str:
        answers: list[str] = []
        while True:
            result = await ctx.elicit(f"Question {len(answers)}?", Answer)
            if not isinstance(result, AcceptedElicitation):
                return f"stopped after {len(answers)} answers"
            answers.append(result.data.answer)

    @server.prompt()
    async def shipping_label(ctx: Context) -> str:
        result = await ctx.elicit("Where should the label point?", ShippingAddress)
        if isinstance(result, AcceptedElicitation):
            return f"Label: {result.data.street}, {result.data.city}"
        return f"Label: no address ({OUTCOME_WORDS[result.action]})"

    @server.resource("shipment://{shipment_id}/address")
    async def shipment_address(shipment_id: str, ctx: Context) -> str:
        result = await ctx.elicit(f"Address of shipment {shipment_id}?", ShippingAddress)
        if isinstance(result, AcceptedElicitation):
            return f"{shipment_id}: {result.data.street}, {result.data.city}"
        return f"{shipment_id}: no address"


def shipping_address() -> Elicit[ShippingAddress]:
    return Elicit("Where should the shipment go?", ShippingAddress)


def confirmation(
    address: Annotated[ShippingAddress, Resolve(shipping_address)],
) -> Elicit[Confirmation]:
    return Elicit(f"Ship to {address.city}?", Confirmation)


def add_mrtr(server: MCPServer[Any]) -> None:

    @server.tool()
    async def book_shipment(
        address: Annotated[ElicitationResult[ShippingAddress], Resolve(shipping_address)],
    ) -> str:
        return booked(address)

    @server.tool()
    async def book_confirmed_shipment(
        address: Annotated[ShippingAddress, Resolve(shipping_address)],
        confirmed: Annotated[Confirmation, Resolve(confirmation)],
    ) -> str:
        if not confirmed.confirm:
            return "shipment not booked: not confirmed"
        return f"booked shipment to {address.street}, {address.city}"

    @server.tool()
    async def keep_asking(ctx: Context) -> str | t.InputRequiredResult:
        asked = int(ctx.request_state or "0")
        params = t.ElicitRequestFormParams(
            message=f"Question {asked}?", requested_schema=render_elicitation_schema(Answer)
        )
        return t.InputRequiredResult(
            input_requests={"answer": t.ElicitRequest(params=params)}, request_state=str(asked + 1)
        )

    @server.prompt()
    async def shipping_label(ctx: Context) -> str | t.InputRequiredResult:
        address = answered_address(ctx)
        if address is None:
            return t.InputRequiredResult(input_requests=address_request(), request_state="label")
        return f"Label: {address}"

    @server.resource("shipment://{shipment_id}/address")
    async def shipment_address(shipment_id: str, ctx: Context) -> str | t.InputRequiredResult:
        address = answered_address(ctx)
        if address is None:
            return t.InputRequiredResult(input_requests=address_request(), request_state="address")
        return f"{shipment_id}: {address}"


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "shipping", log_level="WARNING", request_state_security=security
    )
    if variant == "legacy":
        add_legacy(server)
    else:
        add_mrtr(server)

    @server.tool()
    async def quote(weight_kg: float = 2.5) -> str:
        return f"quote for {weight_kg} kg"

    return server


if __name__ == "__main__":
    main(build)
