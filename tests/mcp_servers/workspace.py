"""Test MCP server "workspace": roots and sampling next to an elicitation.

Run `python tests/mcp_servers/workspace.py --variant legacy|mrtr [--http --port N]`
(see `_serve.py`). Both variants expose the same tools:

- `review_workspace`: asks for the client's roots and a `Topic` (form) in one
  round (mrtr: two independent `Resolve(...)` resolvers, batched by the SDK;
  legacy: `roots/list`, then `elicitation/create`). Returns
  "review <topic> in <root uris, comma-separated>" (or "in no roots").
- `roots_only`: asks only for the roots; returns "roots: <uris>".
- `draft_with_sampling`: asks for a sampling completion and a `Topic` in one
  round (mrtr: a hand-built `InputRequiredResult` keyed "draft" and "topic";
  legacy: `sampling/createMessage`, whose error is caught, then
  `elicitation/create`). Returns "topic <topic>; sampling: <what came back>".
- `sampling_only` (mrtr): asks only for a sampling completion.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any

import mcp_types as t
from _serve import Variant, main
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, ListRoots, Resolve
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from pydantic import BaseModel

# roots and sampling are deprecated in 2026-07-28; this server uses them on purpose.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)


class Topic(BaseModel):
    topic: str


def roots_text(result: t.ListRootsResult) -> str:
    return ", ".join(str(root.uri) for root in result.roots) or "no roots"


def list_roots() -> ListRoots:
    return ListRoots()


def ask_topic() -> Elicit[Topic]:
    return Elicit("What should the review cover?", Topic)


SAMPLE = t.CreateMessageRequestParams(
    messages=[t.SamplingMessage(role="user", content=t.TextContent(type="text", text="Draft it"))],
    max_tokens=50,
)


def add_legacy(server: MCPServer[Any]) -> None:

    @server.tool()
    async def review_workspace(ctx: Context) -> str:
        roots = await ctx.request_context.session.list_roots()
        topic = await ctx.elicit("What should the review cover?", Topic)
        chosen = topic.data.topic if topic.action == "accept" else topic.action
        return f"review {chosen} in {roots_text(roots)}"

    @server.tool()
    async def roots_only(ctx: Context) -> str:
        return f"roots: {roots_text(await ctx.request_context.session.list_roots())}"

    @server.tool()
    async def draft_with_sampling(ctx: Context) -> str:
        try:
            await ctx.request_context.session.create_message(
                SAMPLE.messages, max_tokens=SAMPLE.max_tokens
            )
            sampled = "answered"
        except MCPError as exc:
            sampled = f"error {exc.code}: {exc.message}"
        topic = await ctx.elicit("What should the draft cover?", Topic)
        chosen = topic.data.topic if topic.action == "accept" else topic.action
        return f"topic {chosen}; sampling: {sampled}"


def add_mrtr(server: MCPServer[Any]) -> None:

    @server.tool()
    async def review_workspace(
        roots: Annotated[t.ListRootsResult, Resolve(list_roots)],
        topic: Annotated[Topic, Resolve(ask_topic)],
    ) -> str:
        return f"review {topic.topic} in {roots_text(roots)}"

    @server.tool()
    async def roots_only(roots: Annotated[t.ListRootsResult, Resolve(list_roots)]) -> str:
        return f"roots: {roots_text(roots)}"

    @server.tool()
    async def draft_with_sampling(ctx: Context) -> str | t.InputRequiredResult:
        answers = ctx.input_responses or {}
        topic = answers.get("topic")
        if not isinstance(topic, t.ElicitResult):
            params = t.ElicitRequestFormParams(
                message="What should the draft cover?",
                requested_schema=render_elicitation_schema(Topic),
            )
            return t.InputRequiredResult(
                input_requests={
                    "draft": t.CreateMessageRequest(params=SAMPLE),
                    "topic": t.ElicitRequest(params=params),
                },
                request_state="draft",
            )
        chosen = (topic.content or {}).get("topic") if topic.action == "accept" else topic.action
        sampled = "answered" if "draft" in answers else "no response"
        return f"topic {chosen}; sampling: {sampled}"

    @server.tool()
    async def sampling_only() -> t.InputRequiredResult:
        return t.InputRequiredResult(
            input_requests={"draft": t.CreateMessageRequest(params=SAMPLE)},
            request_state="draft",
        )


def build(variant: Variant, security: RequestStateSecurity | None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "workspace", log_level="WARNING", request_state_security=security
    )
    if variant == "legacy":
        add_legacy(server)
    else:
        add_mrtr(server)
    return server


if __name__ == "__main__":
    main(build)
