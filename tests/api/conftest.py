"""Black-box fixtures: `m3grpc serve` as a subprocess on a tmp SQLite database,
with server bindings pointing at the test MCP servers in tests/mcp_servers/.

Talk to it through the generated stubs (`Stubs`). Every wait is a bounded
loop; nothing asserts on elapsed time.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
)

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ROOT / "tests" / "mcp_servers"
ADDRESS = {"street": "1 Main Street", "city": "Pune"}
BOOKED = "booked shipment to 1 Main Street, Pune"


def write_config(
    path: Path,
    database: Path | str,  # a SQLite path, or a database URL (postgresql+psycopg://...)
    *,
    pool_size: int = 4,
    lease_seconds: float = 30.0,
    queue_capacity: int | None = None,
    grace: float = 2.0,
    processes: int = 1,
    poll_interval: float = 0.1,
    listening_poll_interval: float | None = None,
    park_after: float | None = None,
) -> Path:
    workers = [f"pool_size = {pool_size}", f"poll_interval_seconds = {poll_interval}"]
    if park_after is not None:
        workers.append(f"park_after_seconds = {park_after}")
    if processes != 1:
        workers.append(f"processes = {processes}")
    if listening_poll_interval is not None:
        workers.append(f"listening_poll_interval_seconds = {listening_poll_interval}")
    workers.append(f"lease_seconds = {lease_seconds}")
    if queue_capacity is not None:
        workers.append(f"queue_capacity = {queue_capacity}")
    lines = [
        f"database = {json.dumps(str(database))}",
        f"shutdown_grace_seconds = {grace}",
        f"watch_poll_interval_seconds = {poll_interval}",
        "[workers]",
        *workers,
    ]
    for name, variant in (("shipping", "legacy"), ("shipping_mrtr", "mrtr")):
        lines += [
            f"[servers.{name}]",
            f"command = {json.dumps(sys.executable)}",
            f"args = {json.dumps([str(SERVERS / 'shipping.py'), '--variant', variant])}",
        ]
    # The repository's example server (examples/shipping_server.py): its address form
    # has no top-level title, so Codex forwards it (the codex scenario uses it).
    lines += [
        "[servers.example]",
        f"command = {json.dumps(sys.executable)}",
        f"args = {json.dumps([str(ROOT / 'examples' / 'shipping_server.py')])}",
        'protocol = "legacy"',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


class ServerProcess(ServeProcess):
    """One `python -m m3grpc.cli serve` subprocess, logging at info level to `log`."""

    def __init__(self, config: Path, log: Path) -> None:
        super().__init__(config, log=log, args=("--log-level", "info"))

    def stubs(self) -> Stubs:
        return Stubs(grpc.insecure_channel(self.address))


@dataclass
class Stubs:
    channel: grpc.Channel

    def __post_init__(self) -> None:
        self.executions = execution_service_pb2_grpc.ExecutionServiceStub(self.channel)
        self.elicitation = elicitation_service_pb2_grpc.ElicitationServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    # -- the managed flow ------------------------------------------------------------

    def submit_managed(
        self, *, request_id: str = "", server: str = "shipping", **agent: Any
    ) -> str:
        spec = execution_pb2.AgentSpec(
            harness="scripted",
            server=server,
            tools=[f"{server}:book_shipment"],
            prompt="Ask for the delivery address, then book the shipment.",
            **agent,
        )
        response = self.executions.Submit(
            execution_service_pb2.SubmitRequest(
                agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED, request_id=request_id
            ),
            timeout=30,
        )
        return str(response.execution_id)

    def wait_pending(
        self, execution_id: str, attempts: int = 600
    ) -> elicitation_pb2.PendingElicitationRound:
        for _ in range(attempts):
            response = self.elicitation.GetPending(
                elicitation_service_pb2.GetPendingRequest(execution_id=execution_id), timeout=30
            )
            if response.HasField("round"):
                return response.round
            time.sleep(0.05)
        raise AssertionError(f"no pending round for {execution_id}")

    def respond(
        self,
        round_id: str,
        key: str,
        content: dict[str, Any] | None = None,
        *,
        action: int = elicitation_pb2.ELICITATION_ACTION_ACCEPT,
        request_key: str = "shipping_address",
    ) -> elicitation_service_pb2.RespondResponse:
        return self.elicitation.Respond(
            respond_request(round_id, key, content, action=action, request_key=request_key),
            timeout=30,
        )

    def result(self, execution_id: str) -> execution_pb2.ExecutionResult:
        response = self.executions.Result(
            execution_service_pb2.ResultRequest(execution_id=execution_id), timeout=120
        )
        return response.result


def respond_request(
    round_id: str,
    key: str,
    content: dict[str, Any] | None = None,
    *,
    action: int = elicitation_pb2.ELICITATION_ACTION_ACCEPT,
    request_key: str = "shipping_address",
) -> elicitation_service_pb2.RespondRequest:
    response = elicitation_pb2.ElicitationResponse(action=action)
    if action == elicitation_pb2.ELICITATION_ACTION_ACCEPT:
        response.content.update(ADDRESS if content is None else content)
    return elicitation_service_pb2.RespondRequest(
        round_id=round_id, responses={request_key: response}, idempotency_key=key
    )


# -- error details ------------------------------------------------------------------------


@dataclass
class Failure:
    code: grpc.StatusCode
    status: status_pb2.Status
    info: error_details_pb2.ErrorInfo

    def detail(self, kind: Any) -> Any:
        for any_detail in self.status.details:
            if any_detail.Is(kind.DESCRIPTOR):
                message = kind()
                any_detail.Unpack(message)
                return message
        raise AssertionError(f"no {kind.DESCRIPTOR.full_name} in {self.status}")


def failure(error: grpc.RpcError) -> Failure:
    """The rich status of a failed call; asserts it has exactly one ErrorInfo."""
    status = rpc_status.from_call(error)
    assert status is not None, f"no google.rpc.Status on {error!r}"
    infos = [d for d in status.details if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)]
    assert len(infos) == 1, status
    info = error_details_pb2.ErrorInfo()
    infos[0].Unpack(info)
    assert info.domain == "m3grpc.dev"
    return Failure(error.code(), status, info)


def expect_failure(call: Any, *args: Any, **kwargs: Any) -> Failure:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    return failure(caught.value)


# -- fixtures -------------------------------------------------------------------------------


def start_server(tmp: Path, name: str = "server", **config: Any) -> ServerProcess:
    path = write_config(tmp / f"{name}.toml", tmp / "m3.sqlite", **config)
    return ServerProcess(path, tmp / f"{name}.log").start()


def add_servers(config: Path, bindings: Mapping[str, Mapping[str, Any]]) -> None:
    """Appends one `[servers.<name>]` table per binding to the configuration file."""
    with config.open("a") as out:
        for name, table in bindings.items():
            out.write(f"[servers.{name}]\n")
            out.writelines(f"{key} = {json.dumps(value)}\n" for key, value in table.items())


def running(server: ServerProcess) -> Iterator[ServerProcess]:
    """A fixture's body: yields the started `server`, then terminates it."""
    try:
        yield server
    finally:
        server.terminate()


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the modules whose tests do not watch every execution."""
    yield from running(start_server(tmp_path_factory.mktemp("shared")))


@pytest.fixture
def server(shared_server: ServerProcess) -> ServerProcess:
    """The server `stubs` talks to: the shared one, unless a module starts its own."""
    return shared_server


@pytest.fixture
def stubs(server: ServerProcess) -> Iterator[Stubs]:
    client = server.stubs()
    try:
        yield client
    finally:
        client.close()
