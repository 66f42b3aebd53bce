"""`m3grpc demo`: start the gRPC service, run an execution that pauses for managed
input, answer it over gRPC, and show the result.

The service runs as `m3grpc serve` (a subprocess) on a free loopback port with
an SQLite database in a temporary directory and one server binding: the bundled
example MCP server (examples/shipping_server.py) over stdio. The client side is
the seed program, unchanged but for how the kit is built (RemoteMCPTestKit).

`m3grpc demo --harness codex` runs the same story with a real agent: OpenAI's
Codex CLI (installed by scripts/setup-codex.sh) decides to call the tool;
`--harness claude-code` with Anthropic's Claude Code CLI (scripts/setup-claude-code.sh).
The agent's model is a FAKE one (m3grpc.devtools.fake_model, fake_anthropic: loopback
stand-ins for the hosted LLMs), so the demo needs no account and no network.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from m3grpc.client import RemoteMCPTestKit
from m3grpc.devtools.fake_anthropic import FAKE_ANTHROPIC_API_KEY, FAKE_CLAUDE_MODEL, FakeAnthropic
from m3grpc.devtools.fake_model import FAKE_API_KEY, FAKE_MODEL_NAME, FakeModel
from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.types import ElicitationResponse, ExecutionStatus

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_SERVER = ROOT / "examples" / "shipping_server.py"
# The environment variable that carries the fake model's key to the agent.
FAKE_KEY_VAR = "M3_DEMO_FAKE_MODEL_KEY"
# Per agent harness: its configuration table, the fake model's key and a model name.
AGENTS = {
    "codex": ("codex", FAKE_API_KEY, FAKE_MODEL_NAME),
    "claude-code": ("claude_code", FAKE_ANTHROPIC_API_KEY, FAKE_CLAUDE_MODEL),
}


def _config(directory: Path, harness: str, fake_model_url: str | None = None) -> Path:
    config = directory / "m3.toml"
    lines = [
        f"database = {json.dumps(str(directory / 'm3.sqlite'))}",
        "[servers.shipping]",
        f"command = {json.dumps(sys.executable)}",
        f"args = {json.dumps([str(EXAMPLE_SERVER)])}",
        # The example elicits mid-call: the 2025-11-25 generation.
        'protocol = "legacy"',
    ]
    if harness in AGENTS and fake_model_url is not None:
        lines += [
            f"[{AGENTS[harness][0]}]",
            f"base_url = {json.dumps(fake_model_url)}",
            f'env_key = "{FAKE_KEY_VAR}"',
        ]
    config.write_text("\n".join(lines) + "\n")
    return config


def _start_service(config: Path, harness: str) -> ServeProcess:
    key = AGENTS[harness][1] if harness in AGENTS else ""
    service = ServeProcess(config, env={**os.environ, FAKE_KEY_VAR: key})
    try:
        return service.start()
    except RuntimeError as error:
        raise SystemExit(f"the service did not start: {error}") from None


def _seed_program(target: str, harness: str) -> bool:
    models = [AGENTS[harness][2]] if harness in AGENTS else []
    with RemoteMCPTestKit(target) as kit:
        agent = kit.agents([{"harness": harness, "models": models}])[0]
        handle = agent.submit(
            "Ask for the delivery address, then book the shipment.",
            server="shipping",
            tools=["shipping:book_shipment"],
            human_input="managed",
        )
        print(f"Submit        -> execution {handle.execution_id}")
        deadline = time.monotonic() + 120
        pending = handle.pending_elicitation()
        while pending is None and time.monotonic() < deadline:
            if handle.snapshot().lifecycle is ExecutionStatus.FINISHED:
                result = handle.result(timeout=1)
                print(f"finished before asking: {result.failure_code}: {result.failure_message}")
                return False
            time.sleep(0.1)
            pending = handle.pending_elicitation()
        if pending is None:
            print("the execution did not ask for input within 120 s")
            return False
        request = pending.requests["shipping_address"]
        print(f"GetPending    -> round {pending.round_id}")
        print(f"                 asks {list(pending.requests)}: {request.message!r}")
        print(f"Snapshot      -> {handle.snapshot().lifecycle.value}")
        handle.respond_elicitation(
            pending.round_id,
            {
                "shipping_address": ElicitationResponse(
                    action="accept", content={"street": "1 Main Street", "city": "Pune"}
                )
            },
            idempotency_key=f"address-{pending.round_id}",
        )
        print("Respond       -> accepted")
        result = handle.result(timeout=120)
        print(f"Result        -> {result.outcome.value}")
        for operation in result.operations:
            content = (operation.result or {}).get("content") or [{}]
            print(f"                 {operation.operation_name}: {content[0].get('text')}")
        if result.agent is not None:
            print(f"Agent         -> {result.agent.harness} says {result.agent.final_message!r}")
        return result.outcome.value == "succeeded"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo: `--harness scripted` (default), `codex` or `claude-code`."""
    parser = argparse.ArgumentParser(prog="m3grpc demo")
    parser.add_argument("--harness", choices=["scripted", *AGENTS], default="scripted")
    args = parser.parse_args(list(argv or []))
    with contextlib.ExitStack() as stack:
        fake_url: str | None = None
        if args.harness == "codex":
            fake_url = stack.enter_context(FakeModel()).base_url
        elif args.harness == "claude-code":
            fake_url = stack.enter_context(FakeAnthropic()).base_url
        if fake_url is not None:
            print(f"fake model    -> {fake_url} (a loopback stand-in for a hosted LLM)")
        return _run(args.harness, fake_url)


def _run(harness: str, fake_model_url: str | None) -> int:
    with tempfile.TemporaryDirectory(prefix="m3-demo-") as directory:
        service = _start_service(_config(Path(directory), harness, fake_model_url), harness)
        target = service.address
        try:
            print(f"m3grpc serve  -> listening on {target} (SQLite in {directory})")
            with grpc.insecure_channel(target) as channel:
                health = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=10
                )
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(health.status)
            print(f"Health        -> {status}")
            ok = _seed_program(target, harness)
        finally:
            code = service.terminate(timeout=30)  # SIGTERM: graceful shutdown
            print(f"SIGTERM       -> service exited with {code}")
    return 0 if ok and code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
