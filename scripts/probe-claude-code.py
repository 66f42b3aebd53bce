#!/usr/bin/env python3
"""Run the real Claude Code CLI once against the fake Anthropic model and the probe MCP server,
printing what passes between them: the facts of docs/guides/harnesses/claude-code-notes.md come
from runs of this script, and it rechecks them when the pinned CLI changes.

    eval "$(bash scripts/setup-claude-code.sh)"
    .venv/bin/python scripts/probe-claude-code.py --steps '["call:ask"]' --elicit decline

- `--steps`: the fake model's script, a JSON list of "call:TOOL[:ARGS JSON]" (an MCP tool of
  the probe), "use:NAME[:INPUT JSON]" (any tool, e.g. Bash), "reply:TEXT", "fail:STATUS", or a
  list of calls (one assistant message with several tool calls). Then the fake's default
  (call the first MCP tool, quote its result).
- `--elicit`: how the host answers every elicitation: accept (content fitting the form, or
  `--content JSON`), decline, cancel, error (an error response), never; `--answer-after S`
  waits first.
- `--permission allow|deny`: the answer to every `can_use_tool`.
- `--interrupt-after S`: send `interrupt` S seconds after the first elicitation arrived.
- `--wire FILE`: log the MCP traffic both ways (the server runs behind `--tee`).
- `--variant legacy|mrtr`, `--env K=V`, `--unset-env K`, `--allow`, `--disallow`,
  `--builtin-tools A,B`: as tests/mcp_servers/elicitation_probe.py and
  m3grpc.harness.claude_code_host.ClaudeCodeOptions say.

Lines: `<seconds> <- ...` the CLI wrote, `-> ...` the host wrote; a summary of every model
request follows (offered tools, tool results).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from m3grpc.devtools.fake_anthropic import (  # noqa: E402
    FAKE_ANTHROPIC_API_KEY,
    FAKE_CLAUDE_MODEL,
    CallTool,
    CallTools,
    Fail,
    FakeAnthropic,
    Reply,
    Step,
    UseTool,
    offered_tools,
    tool_results,
)
from m3grpc.harness.claude_code_host import (  # noqa: E402
    Allow,
    ClaudeCodeOptions,
    ClaudeCodeProcess,
    Deny,
    ElicitationReply,
    ElicitationRequest,
    PermissionRequest,
)

PROBE = ROOT / "tests" / "mcp_servers" / "elicitation_probe.py"
SERVER = "probe"
# Long fields of the CLI's messages that say nothing about the protocol.
_NOISE = {"tools", "slash_commands", "skills", "agents", "plugins", "capabilities", "modelUsage"}


def tee(log: Path, command: list[str]) -> int:
    """Run a stdio MCP server, copying each line either way to `log` with a timestamp."""
    out = log.open("a", buffering=1)
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None

    def pump(source: Any, target: Any, direction: str) -> None:
        for line in iter(source.readline, b""):
            record = {"t": round(time.time(), 3), "dir": direction, "msg": line.decode().rstrip()}
            out.write(json.dumps(record) + "\n")
            target.write(line)
            target.flush()
        if direction == "agent->server":
            target.close()

    threading.Thread(
        target=pump, args=(sys.stdin.buffer, server.stdin, "agent->server"), daemon=True
    ).start()
    pump(server.stdout, sys.stdout.buffer, "server->agent")
    return server.wait()


def step(spec: Any) -> Step:
    if isinstance(spec, list):
        calls = [step(item) for item in spec]
        return CallTools([call for call in calls if isinstance(call, CallTool | UseTool)])
    kind, _, rest = str(spec).partition(":")
    if kind in ("call", "use"):
        name, _, arguments = rest.partition(":")
        values = json.loads(arguments or "{}")
        return CallTool(SERVER, name, values) if kind == "call" else UseTool(name, values)
    if kind == "reply":
        return Reply(rest)
    if kind == "fail":
        return Fail(int(rest))
    raise SystemExit(f"unknown step {spec!r}")


def form_content(request: ElicitationRequest) -> dict[str, Any]:
    """Content that fits the probe's forms."""
    properties = (request.requested_schema or {}).get("properties", {})
    if "street" in properties:
        return {"street": "1 Main St", "city": "Springfield"}
    return {"zeta": "z", "alpha": 2, "mid": True, "pick": "a"}


async def probe(args: argparse.Namespace) -> None:
    start = time.monotonic()

    def show(arrow: str, what: Any) -> None:
        if isinstance(what, Mapping):
            what = json.dumps({k: v for k, v in what.items() if k not in _NOISE})
        print(f"{time.monotonic() - start:8.3f} {arrow} {what}", flush=True)

    elicited = asyncio.Event()

    async def can_use_tool(request: PermissionRequest) -> Allow | Deny:
        return Allow() if args.permission == "allow" else Deny(message="denied by the probe")

    async def on_elicitation(request: ElicitationRequest) -> ElicitationReply:
        elicited.set()
        if args.elicit == "never":
            await asyncio.Event().wait()
        await asyncio.sleep(args.answer_after)
        if args.elicit == "error":
            raise RuntimeError("the probe fails on purpose")
        if args.elicit == "accept":
            content = None if request.mode == "url" else form_content(request)
            if args.content is not None:
                content = json.loads(args.content)
            return ElicitationReply(action="accept", content=content)
        return ElicitationReply(action=args.elicit)

    server = [sys.executable, str(PROBE), "--variant", args.variant]
    if args.wire:
        Path(args.wire).write_text("")
        server = [sys.executable, __file__, "--tee", args.wire, "--", *server]
    with FakeAnthropic([step(spec) for spec in json.loads(args.steps)]) as model:
        options = ClaudeCodeOptions(
            **({"binary": args.binary} if args.binary else {}),
            model=FAKE_CLAUDE_MODEL,
            base_url=model.base_url,
            api_key=FAKE_ANTHROPIC_API_KEY,
            mcp_servers={SERVER: {"command": server[0], "args": server[1:]}},
            builtin_tools=[name for name in args.builtin_tools.split(",") if name],
            allowed_tools=args.allow,
            disallowed_tools=args.disallow,
            env={
                **{name: None for name in args.unset_env},
                **dict(pair.split("=", 1) for pair in args.env),
            },
        )
        claude = ClaudeCodeProcess(
            options,
            can_use_tool=can_use_tool,
            on_elicitation=on_elicitation,
            trace=lambda direction, message: show("<-" if direction == "in" else "->", message),
        )
        async with claude:
            assert claude.home is not None
            show("$", " ".join(claude.command(claude.home / "mcp.json")))
            await claude.send_prompt(args.prompt)
            if args.interrupt_after is not None:
                await elicited.wait()
                await asyncio.sleep(args.interrupt_after)
                await claude.interrupt()
            result = await claude.wait_result()
        show("==", f"exit status {claude.returncode}; result {result.subtype} {result.result!r}")
        for index, body in enumerate(model.requests):
            show(f"model request {index}:", f"tools {offered_tools(body)}")
            for received in tool_results(body):
                show("   tool result:", f"{received.text!r} is_error={received.is_error}")
        if model.unanswered:
            show("unanswered:", model.unanswered)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--tee":
        separator = sys.argv.index("--")
        raise SystemExit(tee(Path(sys.argv[2]), sys.argv[separator + 1 :]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="[]")
    parser.add_argument(
        "--elicit", choices=["accept", "decline", "cancel", "error", "never"], default="accept"
    )
    parser.add_argument("--content")
    parser.add_argument("--answer-after", type=float, default=0.0)
    parser.add_argument("--permission", choices=["allow", "deny"], default="allow")
    parser.add_argument("--interrupt-after", type=float)
    parser.add_argument("--variant", choices=["legacy", "mrtr"], default="legacy")
    parser.add_argument("--wire")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--unset-env", action="append", default=[])
    parser.add_argument("--allow", action="append", default=[])
    parser.add_argument("--disallow", action="append", default=[])
    parser.add_argument("--builtin-tools", default="")
    parser.add_argument("--binary")
    parser.add_argument("--prompt", default="Use the probe.")
    asyncio.run(probe(parser.parse_args()))


if __name__ == "__main__":
    main()
