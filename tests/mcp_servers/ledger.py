"""Test MCP server "ledger": 2026-07-28 rounds that a fresh process can resume.

    python tests/mcp_servers/ledger.py [--ephemeral-key] [--http --port N]

It seals every `requestState` with a FIXED key (the MCP Python SDK's
`RequestStateSecurity(keys=[...])`, AES-256-GCM under a key derived from
`STATE_KEY`), so a retry sent to another process of this server (a worker that
took the execution over after a restart) is verified and accepted, and a forged
or foreign state is refused (`invalid_request_state`). `--ephemeral-key` seals
with a key made at start instead (the SDK's default): a retry reaching a fresh
process is then refused, as a resumed round must be with such a server.

Every side effect is appended to the `ledger` file the tools are given (one
line each), so a test can see what ran, in which process, how often:

- tool `reserve(ledger, item)`: no input; appends `reserved <item> pid=<pid>`
  and returns "reserved <item>".
- tool `book(ledger)`: asks for a `ShippingAddress` (key `shipping_address`)
  with a hand-built `InputRequiredResult` whose state names the asking process
  (`asked pid=<pid>` is appended). The retry appends
  `booked <street>, <city> asked_by=<pid> answered_in=<pid>` and returns
  "booked shipment to <street>, <city>" (decline/cancel: "shipment not booked").
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import mcp_types as t
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel

# The fixed sealing key: every process of this server shares it.
STATE_KEY = b"m3-test-ledger-request-state-key"


class ShippingAddress(BaseModel):
    street: str
    city: str


def append(ledger: str, line: str) -> None:
    with Path(ledger).open("a") as file:
        file.write(line + "\n")


def build(security: RequestStateSecurity) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "ledger", log_level="WARNING", request_state_security=security
    )

    @server.tool()
    async def reserve(ledger: str, item: str) -> str:
        append(ledger, f"reserved {item} pid={os.getpid()}")
        return f"reserved {item}"

    @server.tool()
    async def book(ledger: str, ctx: Context) -> str | t.InputRequiredResult:
        answer = (ctx.input_responses or {}).get("shipping_address")
        if ctx.request_state is None or not isinstance(answer, t.ElicitResult):
            append(ledger, f"asked pid={os.getpid()}")
            params = t.ElicitRequestFormParams(
                message="Where should the shipment go?",
                requested_schema=render_elicitation_schema(ShippingAddress),
            )
            return t.InputRequiredResult(
                input_requests={"shipping_address": t.ElicitRequest(params=params)},
                request_state=json.dumps({"asked_by": os.getpid()}),
            )
        # The SDK unsealed and verified the state before this handler ran.
        asked_by = json.loads(ctx.request_state)["asked_by"]
        if answer.action != "accept":
            append(ledger, f"not booked asked_by={asked_by} answered_in={os.getpid()}")
            return "shipment not booked"
        address = ShippingAddress.model_validate(answer.content)
        append(
            ledger,
            f"booked {address.street}, {address.city} "
            f"asked_by={asked_by} answered_in={os.getpid()}",
        )
        return f"booked shipment to {address.street}, {address.city}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ephemeral-key", action="store_true")
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP at /mcp")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    security = (
        RequestStateSecurity.ephemeral()
        if args.ephemeral_key
        else RequestStateSecurity(keys=[STATE_KEY])
    )
    server = build(security)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
