"""Each RPC of the remote client as data: which stub method, the request, how to read the reply.

The synchronous and the asyncio kits differ only in how they run a call
(`grpc` vs `grpc.aio`), so both build their calls here and each has one
runner; a handle method is one line in either kit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import grpc

from m3grpc.servers import ServerDescription
from m3grpc.specs import agent_config
from m3grpc.submit_options import RespondOutcome
from m3grpc.types import (
    ElicitationResponse,
    ExecutionResult,
    ExecutionState,
    ManagedInputStatus,
    PendingElicitationRound,
    RoundPage,
    RoundView,
)
from m3grpc.wire import convert, events, messages, requests, servers
from m3grpc.wire.events import WatchEventClass
from m3grpc.wire.gen.m3.v1 import (
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    execution_service_pb2,
    execution_service_pb2_grpc,
)

R = TypeVar("R")

CHANNEL_OPTIONS = [
    # Keep idle WatchPending streams alive through proxies (the server allows 10 s).
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
]

Pem = bytes | str | os.PathLike[str]


@dataclass(frozen=True)
class TlsOptions:
    """TLS for the channel. Each PEM is its bytes or a file path.

    `root_ca`: the CA that signed the server's certificate (None: the system's roots).
    `client_cert` and `client_key`: this client's certificate (mutual TLS).
    `server_name`: the name to verify the server's certificate against, when it
    differs from the target's host (e.g. a target by IP address)."""

    root_ca: Pem | None = None
    client_cert: Pem | None = None
    client_key: Pem | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("client_cert and client_key go together (mutual TLS)")
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.root_ca),
            private_key=_pem(self.client_key),
            certificate_chain=_pem(self.client_cert),
        )


def _pem(value: Pem | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


@dataclass(frozen=True)
class Connection:
    """How a kit reaches the service: TLS or plaintext, and the metadata of every call
    (the bearer token as `authorization: Bearer ...`, plus any `metadata` given)."""

    credentials: grpc.ChannelCredentials | None
    options: list[tuple[str, Any]]
    metadata: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def of(
        cls,
        tls: TlsOptions | None,
        token: str | None,
        metadata: Mapping[str, str] | None,
    ) -> Connection:
        options: list[tuple[str, Any]] = list(CHANNEL_OPTIONS)
        if tls is not None and tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
        entries = [(key.lower(), value) for key, value in (metadata or {}).items()]
        if token is not None:
            entries.append(("authorization", f"Bearer {token}"))
        return cls(tls.credentials() if tls is not None else None, options, tuple(entries))

    def sync_channel(self, target: str) -> grpc.Channel:
        if self.credentials is not None:
            return grpc.secure_channel(target, self.credentials, options=self.options)
        return grpc.insecure_channel(target, options=self.options)

    def aio_channel(self, target: str) -> grpc.aio.Channel:
        if self.credentials is not None:
            return grpc.aio.secure_channel(target, self.credentials, options=self.options)
        return grpc.aio.insecure_channel(target, options=self.options)

    def call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The metadata of every call (None: none)."""
        return self.metadata or None


ChannelT = TypeVar("ChannelT")


class KitBase(Generic[ChannelT]):
    """What both remote kits are built from: the channel to `target`, the metadata of
    every call, the stubs on the channel, and `timeout` (seconds; None: no deadline)."""

    def __init__(
        self,
        target: str,
        *,
        timeout: float | None = 30.0,
        tls: TlsOptions | None = None,
        token: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        connection = Connection.of(tls, token, metadata)
        self._channel = self._open_channel(connection, target)
        self._metadata = connection.call_metadata()
        self._stubs = Stubs.on(self._channel)
        self.timeout = timeout

    def _open_channel(self, connection: Connection, target: str) -> ChannelT:
        raise NotImplementedError


# The kit's own per-call deadline (its `timeout`), unless a call carries one.
KIT_TIMEOUT: Literal["kit"] = "kit"


@dataclass(frozen=True)
class Stubs:
    """The two service stubs on one channel (a `grpc` or a `grpc.aio` one)."""

    executions: Any  # the generated stubs carry no annotations
    elicitation: Any

    @classmethod
    def on(cls, channel: Any) -> Stubs:
        return cls(
            executions=execution_service_pb2_grpc.ExecutionServiceStub(channel),  # type: ignore[no-untyped-call]
            elicitation=elicitation_service_pb2_grpc.ElicitationServiceStub(channel),  # type: ignore[no-untyped-call]
        )


@dataclass(frozen=True)
class Call(Generic[R]):
    """One unary RPC: `method` picks the stub method, `read` turns the reply into the result."""

    method: Callable[[Stubs], Any]
    request: Any
    read: Callable[[Any], R]
    # Seconds, None for no deadline, or the kit's timeout.
    deadline: float | Literal["kit"] | None = KIT_TIMEOUT


def submit(request: execution_service_pb2.SubmitRequest) -> Call[str]:
    """Submit; the result is the new (or, for a repeated request_id, the first) execution ID."""
    return Call(lambda stubs: stubs.executions.Submit, request, lambda reply: reply.execution_id)


def respond(
    round_id: str,
    responses: Mapping[str, ElicitationResponse | Mapping[str, Any]],
    idempotency_key: str,
    execution_id: str | None = None,
) -> Call[RespondOutcome]:
    """`execution_id`: the round must be that execution's (a handle's own)."""
    return Call(
        lambda stubs: stubs.elicitation.Respond,
        requests.respond_request(round_id, responses, idempotency_key, execution_id),
        _respond_outcome,
    )


def pending(execution_id: str) -> Call[PendingElicitationRound | None]:
    return Call(
        lambda stubs: stubs.elicitation.GetPending,
        elicitation_service_pb2.GetPendingRequest(execution_id=execution_id),
        _pending_round,
    )


def snapshot(execution_id: str) -> Call[ExecutionState]:
    return Call(
        lambda stubs: stubs.executions.Snapshot,
        execution_service_pb2.SnapshotRequest(execution_id=execution_id),
        lambda reply: messages.state_model(reply.state),
    )


def result(execution_id: str, timeout: float | None) -> Call[ExecutionResult]:
    """A Result wait: its own deadline, a little past the wait (None: wait as long as it takes)."""
    request, deadline = requests.result_request(execution_id, timeout)
    return Call(
        lambda stubs: stubs.executions.Result,
        request,
        lambda reply: messages.result_model(reply.result),
        deadline,
    )


def cancel(execution_id: str) -> Call[None]:
    return Call(
        lambda stubs: stubs.executions.Cancel,
        execution_service_pb2.CancelRequest(execution_id=execution_id),
        lambda reply: None,
    )


def list_servers(
    names: Sequence[str], include_tools: bool, kit_timeout: float | None
) -> Call[list[ServerDescription]]:
    """ListServers. Listing tools connects to every server (each bounded at 30 s on
    the service), so that call gets at least 60 s."""
    deadline: float | Literal["kit"] | None = KIT_TIMEOUT
    if include_tools:
        deadline = None if kit_timeout is None else max(kit_timeout, 60.0)
    return Call(
        lambda stubs: stubs.executions.ListServers,
        servers.list_servers_request(list(names), include_tools),
        servers.server_models,
        deadline,
    )


def get_round(round_id: str) -> Call[RoundView]:
    """GetRound: any round by ID, its answer redacted."""
    return Call(
        lambda stubs: stubs.elicitation.GetRound,
        elicitation_service_pb2.GetRoundRequest(round_id=round_id),
        lambda reply: messages.round_view_model(reply.round),
    )


def list_rounds(
    execution_id: str | None,
    statuses: Sequence[ManagedInputStatus | str],
    page_size: int,
    page_token: str | None,
) -> Call[RoundPage]:
    """ListRounds: one page, oldest first (AIP-158)."""
    request = elicitation_service_pb2.ListRoundsRequest(
        page_size=page_size,
        page_token=page_token or "",
        execution_id=execution_id or "",
        statuses=[
            convert.MANAGED_INPUT_STATUS.wire(ManagedInputStatus(status).value)
            for status in statuses
        ],
    )
    return Call(lambda stubs: stubs.elicitation.ListRounds, request, messages.round_page_model)


def watch_request(
    execution_id: str | None, cursor: str | None, kinds: Iterable[WatchEventClass] | None = None
) -> execution_service_pb2.WatchPendingRequest:
    """`kinds`: only events of these classes (None or empty: every kind)."""
    return execution_service_pb2.WatchPendingRequest(
        execution_id=execution_id or "",
        cursor=cursor or "",
        kinds=events.kinds_message(kinds or ()),
    )


# What a handle's wait_for_pending / pending_rounds watch: rounds, and the finish
# that ends the wait (the stream of one execution ends after it anyway).
WAIT_KINDS: tuple[WatchEventClass, ...] = (events.RoundPending, events.ExecutionFinished)


def pending_wait_timeout(execution_id: str, timeout: float | None) -> TimeoutError:
    """wait_for_pending's timeout, worded as the embedded handle's."""
    return TimeoutError(f"execution {execution_id} had no pending round within {timeout} s")


def agent_configs(configs: Any) -> list[tuple[str, tuple[str, ...]]]:
    """(harness, models) of each agent configuration, as `kit.agents(...)` takes them
    (and checks them: `specs.agent_config`)."""
    return [agent_config(config, index) for index, config in enumerate(configs)]


def _respond_outcome(reply: elicitation_service_pb2.RespondResponse) -> RespondOutcome:
    return RespondOutcome(
        round_id=reply.round_id,
        status=messages.managed_input_status_model(reply.status),
        replayed=reply.replayed,
    )


def _pending_round(
    reply: elicitation_service_pb2.GetPendingResponse,
) -> PendingElicitationRound | None:
    return messages.pending_round_model(reply.round) if reply.HasField("round") else None
