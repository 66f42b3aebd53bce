"""A real `m3grpc serve` with the web inbox on, for tests/api/test_inbox*.py.

Bindings: `order_form` (a form of every field type), `profile_form` (formats,
patterns, titled choices, a multi-select), `shipping` (legacy address form) and
`url_required` (URL elicitations), all stdio test servers
from tests/mcp_servers. Executions are submitted over gRPC (`Stubs`); the inbox
is reached over HTTP (`InboxClient`, standard library only).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.api.conftest import SERVERS, Stubs


def write_inbox_config(path: Path, database: Path) -> Path:
    lines = [
        f"database = {json.dumps(str(database))}",
        "shutdown_grace_seconds = 2.0",
        "watch_poll_interval_seconds = 0.1",
        "[workers]",
        "poll_interval_seconds = 0.1",
    ]
    for name, args in (
        ("order_form", [str(SERVERS / "order_form.py")]),
        ("shipping", [str(SERVERS / "shipping.py"), "--variant", "legacy"]),
        ("url_required", [str(SERVERS / "url_required.py")]),
        ("profile_form", [str(SERVERS / "profile_form.py")]),
    ):
        lines += [
            f"[servers.{name}]",
            f"command = {json.dumps(sys.executable)}",
            f"args = {json.dumps(args)}",
            'protocol = "legacy"',
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


class InboxService(ServeProcess):
    def __init__(self, config: Path, log: Path) -> None:
        super().__init__(
            config, log=log, args=("--inbox-listen", "127.0.0.1:0", "--log-level", "info")
        )

    def stubs(self) -> Stubs:
        return Stubs(grpc.insecure_channel(self.address))


@pytest.fixture(scope="module")
def inbox_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InboxService]:
    tmp = tmp_path_factory.mktemp("inbox")
    config = write_inbox_config(tmp / "m3.toml", tmp / "m3.sqlite")
    service = InboxService(config, tmp / "server.log").start()
    assert service.inbox_url.startswith("http://127.0.0.1:"), service.output
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def stubs(inbox_service: InboxService) -> Iterator[Stubs]:
    stubs = inbox_service.stubs()
    try:
        yield stubs
    finally:
        stubs.close()


def submit(stubs: Stubs, server: str, tool: str) -> str:
    spec = execution_pb2.AgentSpec(
        harness="scripted", server=server, tools=[f"{server}:{tool}"], prompt="Answer me."
    )
    reply = stubs.executions.Submit(
        execution_service_pb2.SubmitRequest(
            agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
        ),
        timeout=30,
    )
    return str(reply.execution_id)


def round_status(stubs: Stubs, round_id: str) -> int:
    reply = stubs.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
    )
    return int(reply.round.status)


PENDING = elicitation_pb2.MANAGED_INPUT_STATUS_PENDING


class InboxClient:
    """The inbox's JSON endpoints over HTTP: (status code, JSON body)."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.base + path,
            data=body,
            method=method,
            headers={"Content-Type": "application/json"} if body is not None else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def get(self, path: str) -> tuple[int, Any]:
        return self.call("GET", path)

    def respond(self, round_id: str, document: Any) -> tuple[int, Any]:
        raw = document if isinstance(document, bytes) else json.dumps(document).encode()
        return self.call("POST", f"/api/rounds/{round_id}/respond", raw)


def wait_listed(client: InboxClient, execution_id: str, attempts: int = 600) -> dict[str, Any]:
    """The pending round of `execution_id` once GET /api/rounds lists it."""
    for _ in range(attempts):
        _, body = client.get("/api/rounds")
        for listed in body["rounds"]:
            if listed["execution_id"] == execution_id:
                return dict(listed)
        time.sleep(0.05)
    raise AssertionError(f"no round of {execution_id} listed")
