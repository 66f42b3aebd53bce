"""Test MCP server "probe": tools that show what of an elicitation reaches an agent and its answer
the server (scripts/probe-claude-code.py and docs/guides/harnesses/claude-code-notes.md).

Run `python tests/mcp_servers/elicitation_probe.py --variant legacy|mrtr` (see `_serve.py`:
legacy serves only the `initialize` handshake; mrtr also 2026-07-28). Each tool returns what
it received, as "<tool>: <JSON>":

- `ask`: `ctx.elicit("Where to?", Address)` (a pydantic schema with a top-level title).
- `ask_raw`: a hand-built form whose schema has a top-level title, its properties out of
  alphabetical order, and `_meta` with a key of its own and `anthropic/permissionDisplay`.
- `ask_twice`: two `ctx.elicit`s in a row.
- `ask_read_only(tag)`: `ctx.elicit`, in a tool annotated `readOnlyHint` (an agent may run
  such calls in parallel).
- `ask_url`: `ctx.elicit_url` (elicitation id "probe-url").
- `need_url`: always fails with the URL-elicitation-required error (-32042).
- `echo(text)`: no input; returns the text.
- `mrtr_ask`: a 2026-07-28 `Resolve(...)`/`Elicit(...)` resolver (under the legacy
  protocol the SDK asks with `elicitation/create` instead).
- `mrtr_two`: one `InputRequiredResult` with two form requests ("first", "second");
  `mrtr_url`: one with a URL request ("pay").
"""

from __future__ import annotations

import json
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
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel

RAW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Top title",
    "properties": {
        "zeta": {"type": "string", "title": "Z"},
        "alpha": {"type": "integer", "minimum": 1},
        "mid": {"type": "boolean"},
        "pick": {"type": "string", "enum": ["a", "b"]},
    },
    "required": ["zeta"],
}
RAW_META = {
    "probe/key": "raw",
    "anthropic/permissionDisplay": {"title": "T", "displayName": "DN", "description": "D"},
}


class Address(BaseModel):
    """An address"""

    street: str
    city: str


def outcome(tool: str, result: ElicitationResult[Address]) -> str:
    data = result.data.model_dump() if isinstance(result, AcceptedElicitation) else None
    return f"{tool}: " + json.dumps({"action": result.action, "content": data})


def where() -> Elicit[Address]:
    return Elicit("Where to (MRTR)?", Address)


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "probe", log_level="WARNING", request_state_security=security
    )

    @server.tool()
    async def ask(ctx: Context) -> str:
        return outcome("ask", await ctx.elicit("Where to?", Address))

    @server.tool()
    async def ask_raw(ctx: Context) -> str:
        params = t.ElicitRequestFormParams(
            message="Raw form", requested_schema=RAW_SCHEMA, _meta=RAW_META
        )
        answer = await ctx.request_context.session.send_request(
            t.ElicitRequest(params=params),
            t.ElicitResult,
            metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
        )
        return "ask_raw: " + json.dumps({"action": answer.action, "content": answer.content})

    @server.tool()
    async def ask_twice(ctx: Context) -> str:
        first = await ctx.elicit("First?", Address)
        second = await ctx.elicit("Second?", Address)
        return f"ask_twice: {first.action} {second.action}"

    @server.tool(annotations=t.ToolAnnotations(read_only_hint=True))
    async def ask_read_only(ctx: Context, tag: str = "x") -> str:
        return outcome(f"ask_read_only {tag}", await ctx.elicit(f"Read-only {tag}?", Address))

    @server.tool()
    async def ask_url(ctx: Context) -> str:
        answer = await ctx.elicit_url("Open this page", "https://pay.example.test/", "probe-url")
        return f"ask_url: {answer.action}"

    @server.tool()
    async def need_url() -> str:
        raise UrlElicitationRequiredError(
            [
                t.ElicitRequestURLParams(
                    message="Log in",
                    url="https://vault.example.test/login",
                    elicitation_id="vault-login",
                )
            ],
            "This vault requires browser login.",
        )

    @server.tool()
    async def echo(text: str = "hi") -> str:
        return f"echo: {text}"

    @server.tool()
    async def mrtr_ask(
        address: Annotated[ElicitationResult[Address], Resolve(where)],
    ) -> str:
        return outcome("mrtr_ask", address)

    @server.tool()
    async def mrtr_two(ctx: Context) -> str | t.InputRequiredResult:
        answers = ctx.input_responses or {}
        if not answers:
            schema = render_elicitation_schema(Address)
            requests = {
                key: t.ElicitRequest(
                    params=t.ElicitRequestFormParams(
                        message=f"MRTR {key}?", requested_schema=schema
                    )
                )
                for key in ("first", "second")
            }
            return t.InputRequiredResult(input_requests=requests, request_state="two")
        dumped = {key: answer.model_dump(exclude_none=True) for key, answer in answers.items()}
        return "mrtr_two: " + json.dumps(dumped, sort_keys=True)

    @server.tool()
    async def mrtr_url(ctx: Context) -> str | t.InputRequiredResult:
        answers = ctx.input_responses or {}
        if not answers:
            params = t.ElicitRequestURLParams(
                message="Pay in the browser",
                url="https://pay.example.test/mrtr",
                elicitation_id="mrtr-pay",
            )
            requests = {"pay": t.ElicitRequest(params=params)}
            return t.InputRequiredResult(input_requests=requests, request_state="url")
        dumped = {key: answer.model_dump(exclude_none=True) for key, answer in answers.items()}
        return "mrtr_url: " + json.dumps(dumped, sort_keys=True)

    return server


if __name__ == "__main__":
    main(build)
