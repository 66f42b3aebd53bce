"""Public MCP server bindings: where a harness finds the server an execution talks to.

A binding is a frozen pydantic model tagged by `kind` ("stdio" or "http"), so a
binding survives a JSON round trip (`server_binding_adapter`) and can sit in a
pydantic field typed `TaggedServerBinding`.

`protocol` chooses how the MCP client negotiates the protocol generation:

- "auto" (default, the SDK's own default): probe `server/discover` and speak
  2026-07-28 when the server supports it, else fall back to the `initialize`
  handshake (2025-11-25 and older).
- "legacy": always use the `initialize` handshake. Needed for servers that
  answer 2026-07-28 but still elicit with `ctx.elicit(...)` mid-call: in the
  2026-07-28 protocol a server has no back-channel for `elicitation/create`, so
  such a tool fails unless the connection is legacy.
- "2026-07-28": speak only that version. The harness still probes
  (`server/discover`, else `initialize`), so that a server offering only an
  older version fails the operation `protocol_mismatch`, naming the binding's
  protocol and what the server offered, instead of failing its first call.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

McpProtocol = Literal["auto", "legacy", "2026-07-28"]

# A binding name prefixes tool selections ("shipping:book_shipment"), so it
# cannot contain ":" or whitespace.
_NAME_PATTERN = r"^[^:\s]+$"


class ServerRoot(BaseModel):
    """One MCP root (`roots/list`) the client offers the server: a `file://` URI."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str = Field(pattern=r"^file://", description="A file:// URI.")
    name: str | None = Field(default=None, description="A name shown to the server.")


class _Binding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=_NAME_PATTERN)
    protocol: McpProtocol = Field(
        default="auto",
        description='The MCP protocol generation: "auto" (negotiated), "legacy" (2025-11-25 '
        'and older: elicitation/create) or "2026-07-28" (multi round-trip, resumable rounds).',
    )
    # What the harness answers a server's `roots/list` with (both protocol
    # generations: a legacy request, or a 2026-07-28 input request). Empty by default.
    roots: Sequence[ServerRoot] = Field(
        default=(), description="What the server's roots/list is answered with."
    )

    @field_validator("roots")
    @classmethod
    def _roots_tuple(cls, value: Sequence[ServerRoot]) -> tuple[ServerRoot, ...]:
        return tuple(value)


class StdioServer(_Binding):
    """An MCP server the harness launches as a subprocess and talks to over stdin/stdout.

    `env` is merged over the MCP SDK's minimal inherited environment (HOME,
    PATH, SHELL, TERM, USER, LOGNAME); the rest of the caller's environment is
    not passed on. From a Python environment that is not activated, PATH has the
    environment's directory first (`stdio_environment`).
    """

    kind: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1, description="The program to run (found on PATH).")
    args: Sequence[str] = Field(default=(), description="Its arguments.")
    env: Mapping[str, str] = Field(
        default_factory=dict,
        description="Variables set over a minimal inherited environment "
        "(HOME, PATH, SHELL, TERM, USER, LOGNAME).",
    )
    cwd: Path | None = Field(
        default=None, description="Its working directory; unset: the service's."
    )

    @field_validator("args")
    @classmethod
    def _args_tuple(cls, value: Sequence[str]) -> tuple[str, ...]:
        # Stored as a tuple whatever sequence came in, so equal bindings compare
        # equal (also after a JSON round trip) and a binding cannot be mutated.
        return tuple(value)


class HttpServer(_Binding):
    """An MCP server reached over Streamable HTTP at `url`, sending `headers` on every request."""

    kind: Literal["http"] = "http"
    url: str = Field(description="The Streamable HTTP endpoint (http:// or https://).")
    headers: Mapping[str, str] = Field(
        default_factory=dict, description="Headers sent on every request."
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("url must be an absolute http:// or https:// URL")
        return value


ServerBinding = StdioServer | HttpServer
"""Either binding; use `TaggedServerBinding` as a pydantic field type."""

# What a stdio server inherits of this process's environment (the MCP SDK's list).
INHERITED_VARIABLES = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


def stdio_environment(binding: StdioServer) -> dict[str, str]:
    """The variables set over the inherited ones when `binding`'s server starts: its
    `env`, and PATH with this interpreter's directory first when that directory is
    not on PATH, as if its environment were activated.

    `.venv/bin/m3grpc serve` run without activating `.venv` finds `python3` (or a
    server installed into `.venv`) in `.venv`, with the packages the service itself
    imports, not in the system's Python. PATH stays as given when the binding sets
    it, or when a virtual environment is activated ($VIRTUAL_ENV): the caller chose.
    """
    env = dict(binding.env)
    path = os.environ.get("PATH", os.defpath)
    own = os.path.dirname(sys.executable)
    if "PATH" in env or "VIRTUAL_ENV" in os.environ or not own:
        return env
    if own in (os.path.normpath(entry) for entry in path.split(os.pathsep) if entry):
        return env
    env["PATH"] = os.pathsep.join([own, path]) if path else own
    return env


def inherited_environment(binding: StdioServer) -> dict[str, str]:
    """The whole environment `binding`'s server starts with."""
    inherited = {name: os.environ[name] for name in INHERITED_VARIABLES if name in os.environ}
    return inherited | stdio_environment(binding)


TaggedServerBinding = Annotated[ServerBinding, Field(discriminator="kind")]

server_binding_adapter: TypeAdapter[ServerBinding] = TypeAdapter(TaggedServerBinding)
"""Validates/dumps a binding from/to JSON by its `kind` tag."""


__all__ = [
    "HttpServer",
    "McpProtocol",
    "ServerBinding",
    "ServerRoot",
    "StdioServer",
    "TaggedServerBinding",
    "inherited_environment",
    "server_binding_adapter",
    "stdio_environment",
]


# -- what ListServers tells a remote client -------------------------------------------


class ToolDescription(BaseModel):
    """A tool a bound server lists (ListServers with tools)."""

    model_config = ConfigDict(frozen=True)

    name: str
    title: str = ""
    description: str = ""
    input_schema: dict[str, object] = Field(default_factory=dict)


class ServerListingError(BaseModel):
    """Why a binding's tools could not be listed: a lower-case failure code
    (`server_unavailable`, `protocol_mismatch`, `mcp_error`, `timeout`) and a message."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str = ""


class ServerDescription(BaseModel):
    """A binding configured on a service, as ListServers describes it: its name,
    transport and protocol generation, and (when asked) its tools or why they
    could not be listed. Never its command, URL, headers or environment."""

    model_config = ConfigDict(frozen=True)

    name: str
    transport: Literal["stdio", "streamable_http"]
    protocol: McpProtocol
    negotiated_protocol_version: str = ""
    tools: tuple[ToolDescription, ...] = ()
    tools_error: ServerListingError | None = None
