"""The gRPC server: servicers, health checking and reflection on one grpc.aio
server, the Runtime that does the work, and graceful shutdown on a signal.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from m3grpc.api import process_memory
from m3grpc.api.auth import Authenticator, AuthInterceptor
from m3grpc.api.config import ServiceConfig, Tls, check_listen, exposure_problem
from m3grpc.api.elicitation_service import ElicitationService
from m3grpc.api.execution_service import ExecutionService
from m3grpc.api.health import HealthMonitor
from m3grpc.api.logs import JsonFormatter
from m3grpc.api.preflight import describe_cause as _cause
from m3grpc.api.preflight import preflight
from m3grpc.api.preflight import redact_url as _redacted
from m3grpc.api.rate_limits import RateLimiter, RateLimitInterceptor
from m3grpc.api.reflection import enable_reflection
from m3grpc.api.registration import add_servicer
from m3grpc.api.rpc_log import RpcLogInterceptor
from m3grpc.api.watch import PendingWatch
from m3grpc.api.worker_processes import WorkerProcesses
from m3grpc.errors import EncryptionKeyError, ManagedInputValidationError, ModelValidationError
from m3grpc.runtime import (
    Runtime,
    SchemaVersionError,
    SqlExecutionStore,
    default_harnesses,
    faults_reported_by_caller,
    load_cipher,
    sqlite_location_problem,
)
from m3grpc.servers import ServerBinding
from m3grpc.wire.gen.m3.v1 import elicitation_service_pb2, execution_service_pb2

if TYPE_CHECKING:
    # Imported where they are configured (off by default): the Prometheus client
    # library and the inbox's routes stay out of a service that serves neither.
    from m3grpc.api.inbox import InboxServer
    from m3grpc.api.metrics import ServiceMetrics

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    execution_service_pb2.DESCRIPTOR.services_by_name["ExecutionService"].full_name,
    elicitation_service_pb2.DESCRIPTOR.services_by_name["ElicitationService"].full_name,
)


class StartupError(RuntimeError):
    """The service cannot start; the message is one line for the operator."""


class ListenError(StartupError):
    """The server could not bind its listen address."""


class TracingUnavailableError(StartupError):
    """`[tracing]` is enabled but the `tracing` extra is not installed."""


class DatabaseOpenError(StartupError):
    """The configured database cannot be opened (unreachable, no driver, no access)."""


class InsecureListenError(StartupError):
    """Beyond loopback without TLS and authentication, and no `allow_insecure = true`."""


class TlsFilesError(StartupError):
    """A configured TLS certificate, key or CA file cannot be read."""


class EncryptionKeysError(StartupError):
    """The encryption keys are malformed or unreadable, or stored responses are
    sealed with a key that is not configured."""


class SchemaError(StartupError):
    """The database's schema is behind (or ahead of) this version: `m3grpc db upgrade`."""


def server_options(config: ServiceConfig) -> list[tuple[str, int]]:
    keepalive_ms = int(config.keepalive_seconds * 1000)
    return [
        # gRPC sets SO_REUSEPORT by default: a second server on a busy port would
        # start and the kernel would split connections between the two processes.
        ("grpc.so_reuseport", 0),
        # Ping idle connections so proxies and NATs keep long WatchPending streams.
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Accept client keepalive pings as often as every 10 s.
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ]


@dataclass
class RunningService:
    """A started service: its bound address and what `stop` shuts down."""

    address: str
    server: grpc.aio.Server
    runtime: Runtime
    store: SqlExecutionStore
    health: Any
    shutdown: asyncio.Event = field(default_factory=asyncio.Event)
    health_monitor: HealthMonitor | None = None
    metrics: ServiceMetrics | None = None
    # HOST:PORT of the Prometheus endpoint, when one is served.
    metrics_address: str | None = None
    # Flushes and stops trace export (`[tracing]` enabled).
    stop_tracing: Callable[[], None] | None = None
    inbox: InboxServer | None = None
    # WatchPending's streams and their one reader of the event log.
    watch: PendingWatch | None = None

    async def stop(self, grace: float) -> None:
        """Stop accepting calls; in-flight calls and executions get `grace` seconds."""
        self.shutdown.set()  # open WatchPending streams end (UNAVAILABLE) and can resume
        if self.health_monitor is not None:
            await self.health_monitor.stop()
        await self.health.enter_graceful_shutdown()
        if self.inbox is not None:
            await self.inbox.stop()
        try:
            await asyncio.gather(self.server.stop(grace), self.runtime.stop(grace))
        finally:
            self.store.close()
            if self.metrics is not None:
                self.metrics.close()
            if self.stop_tracing is not None:
                self.stop_tracing()


async def start_service(
    config: ServiceConfig,
    *,
    listen: str | None = None,
    metrics_listen: str | None = None,
    inbox_listen: str | None = None,
    config_source: str | None = None,
) -> RunningService:
    address = listen or config.listen
    metrics_address = metrics_listen or config.metrics_listen
    inbox_address = inbox_listen or config.inbox.listen
    # Which option or key each address came from, for the refusals' one line.
    setting = {
        "grpc": "--listen" if listen else "listen",
        "metrics": "--metrics-listen" if metrics_listen else "metrics_listen",
        "inbox": "--inbox-listen" if inbox_listen else "[inbox] listen",
    }
    addresses = [("grpc", address), ("metrics", metrics_address), ("inbox", inbox_address)]
    served = [(setting[name], value) for name, value in addresses if value is not None]
    for name, value in served:
        try:
            check_listen(value)  # an option overrides the already validated config value
        except ValueError as exc:
            raise ListenError(f"{name}: {exc}") from None
    _check_exposure(config, address, inbox_address)
    credentials = _server_credentials(config.tls) if config.tls is not None else None
    # Before anything else starts, so that a refused start has touched nothing.
    for name, value in served:
        _probe_listen(value, name)
    tracing_interceptors, stop_tracing = _start_tracing(config)
    try:
        store = _open_store(config)
    except StartupError:
        if stop_tracing is not None:
            stop_tracing()
        raise
    _log_preflight(config, config_source, address, inbox_address)
    runtime = Runtime(
        store,
        settings=config.workers.settings(),
        queue_capacity=config.workers.queue_capacity,
        harnesses=default_harnesses(
            codex=config.codex.settings(), claude_code=config.claude_code.settings()
        ),
        limits=config.runtime_limits(),
    )
    metrics = None
    if metrics_address is not None:
        from m3grpc.api.metrics import ServiceMetrics

        metrics = ServiceMetrics()
    # The log interceptor outermost but for tracing, so refused calls are logged and counted.
    interceptors: list[grpc.aio.ServerInterceptor] = [
        *tracing_interceptors,
        RpcLogInterceptor(metrics.on_rpc if metrics is not None else None),
    ]
    authenticator = AuthInterceptor.for_config(config)
    if authenticator is not None:
        interceptors.append(authenticator)
    limiter = RateLimiter.for_config(config.rate_limits)
    if limiter is not None:  # inside authentication: it limits the caller's principal
        interceptors.append(RateLimitInterceptor(limiter))
    server = grpc.aio.server(options=server_options(config), interceptors=interceptors)
    # Bound before the workers start: a start that loses the port claims no work.
    try:
        if credentials is not None:
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpc raises RuntimeError when it cannot bind
        port = 0
        log.debug("bind failed", exc_info=exc)
    if port == 0:
        store.close()
        if stop_tracing is not None:
            stop_tracing()
        raise ListenError(f"cannot listen on {address} ({setting['grpc']})")
    shutdown = asyncio.Event()
    watch = PendingWatch(
        runtime, poll_interval=config.watch_poll_interval_seconds, shutdown=shutdown
    )
    metrics_bound = None
    if metrics is not None and metrics_address is not None:
        try:
            metrics_bound = metrics.serve(metrics_address)
        except OSError as exc:
            store.close()
            if stop_tracing is not None:
                stop_tracing()
            raise ListenError(
                f"cannot listen on {metrics_address} ({setting['metrics']}): {exc.strerror}"
            ) from None
        metrics.track(runtime, watch)
    inbox = None
    if inbox_address is not None:
        # The inbox takes the service's bearer tokens (a browser sends no client
        # certificate to it) and shares the Respond buckets.
        from m3grpc.api.inbox import InboxServer
        from m3grpc.api.inbox.access import InboxAccess

        tokens = Authenticator(config.auth, certificates=False) if config.auth.tokens else None
        inbox = InboxServer(runtime, watch, inbox_address, InboxAccess(tokens, limiter))
        try:
            inbox.bind()
        except OSError as exc:
            store.close()
            if metrics is not None:
                metrics.close()
            if stop_tracing is not None:
                stop_tracing()
            raise ListenError(
                f"cannot listen on {inbox_address} ({setting['inbox']}): {exc.strerror}"
            ) from None
    await runtime.start()
    add_m3_services(server, runtime, config.servers, watch)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_reflection(server, (*SERVICE_NAMES, health.SERVICE_NAME))
    await server.start()
    monitor = HealthMonitor(
        runtime, health_servicer, SERVICE_NAMES, interval=config.health_check_interval_seconds
    )
    await monitor.start()
    if inbox is not None:
        await inbox.start()
    host = address.rpartition(":")[0]
    log.info(
        "serving on %s:%s",
        host,
        port,
        extra={
            "event": "service.started",
            "metrics": metrics_bound,
            "inbox": inbox.address if inbox is not None else None,
            "bindings": len(config.servers),
        },
    )
    return RunningService(
        f"{host}:{port}",
        server,
        runtime,
        store,
        health_servicer,
        shutdown,
        health_monitor=monitor,
        metrics=metrics,
        metrics_address=metrics_bound,
        stop_tracing=stop_tracing,
        inbox=inbox,
        watch=watch,
    )


def add_m3_services(
    server: grpc.aio.Server,
    runtime: Runtime,
    bindings: Mapping[str, ServerBinding],
    watch: PendingWatch,
) -> None:
    """ExecutionService and ElicitationService on `runtime`, registered with
    deserializers that turn undecodable bytes into typed errors."""
    add_servicer(
        server,
        ExecutionService(runtime, bindings, watch),
        execution_service_pb2.DESCRIPTOR.services_by_name["ExecutionService"],
        ModelValidationError,
    )
    add_servicer(
        server,
        ElicitationService(runtime),
        elicitation_service_pb2.DESCRIPTOR.services_by_name["ElicitationService"],
        ManagedInputValidationError,
    )


def _start_tracing(config: ServiceConfig) -> tuple[list[Any], Callable[[], None] | None]:
    """The tracing interceptor and what stops the export, when `[tracing]` is enabled;
    nothing of OpenTelemetry is imported when it is not."""
    if not config.tracing.enabled:
        return [], None
    try:
        from m3grpc.api import otel
    except ImportError as exc:
        raise TracingUnavailableError(
            f"tracing is enabled but OpenTelemetry is not installed ({exc.name}): "
            "pip install 'm3grpc[tracing]'"
        ) from None
    provider = otel.install_tracing(config.tracing)

    def stop() -> None:
        otel.uninstall_tracing(provider)

    return [otel.TracingInterceptor(provider)], stop


def _check_exposure(config: ServiceConfig, address: str, inbox_address: str | None) -> None:
    """Refuse to serve beyond loopback without TLS and authentication (`exposure_problem`)."""
    problem = exposure_problem(config, address, inbox_address)
    if problem is not None:
        raise InsecureListenError(problem)


def _server_credentials(tls: Tls) -> grpc.ServerCredentials:
    def read(kind: str, path: str) -> bytes:
        try:
            with open(path, "rb") as file:
                return file.read()
        except OSError as exc:
            raise TlsFilesError(f"cannot read the TLS {kind} {path}: {exc.strerror}") from None

    pair = (read("key", tls.key), read("certificate", tls.cert))
    client_ca = read("client CA", tls.client_ca) if tls.client_ca is not None else None
    return grpc.ssl_server_credentials(
        [pair],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None and tls.require_client_cert,
    )


def _probe_listen(address: str, setting: str) -> None:
    """Raise ListenError if `address` (of `setting`, the option or key that names it)
    cannot be bound, with the OS's reason.

    gRPC's own bind failure is a RuntimeError without the reason plus a
    multi-line log on stderr; probing first turns a busy port into one clear line.
    SO_REUSEADDR, as gRPC sets it, so a port left in TIME_WAIT by an earlier run
    is not refused: only a live listener is. (A start racing another process for
    the port can still pass the probe; add_insecure_port's result catches that.)
    """
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        candidates = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {address} ({setting}): {exc.strerror}") from None
    errors: list[OSError] = []
    bound = 0
    for family, kind, proto, _, sockaddr in candidates:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(sockaddr)
                bound += 1
        except OSError as exc:
            errors.append(exc)
    # Like gRPC, serve if any resolved address binds (`localhost` without IPv6),
    # but never next to a live listener on one of them.
    in_use = [exc for exc in errors if exc.errno == errno.EADDRINUSE]
    if in_use or not bound:
        reason = (in_use or errors)[0].strerror
        if in_use:
            reason = f"{reason} (is another server running on this port?)"
        raise ListenError(f"cannot listen on {address} ({setting}): {reason}")


def _log_preflight(
    config: ServiceConfig, source: str | None, listen: str, inbox_listen: str | None
) -> None:
    """The `m3grpc check-config` summary, at INFO (a problem at WARNING); never fatal:
    a broken binding fails only the executions that use it."""
    if not log.isEnabledFor(logging.INFO):
        return
    findings = preflight(config, source, listen=listen, inbox_listen=inbox_listen).findings
    for finding in findings:
        level = logging.INFO if finding.level == "ok" else logging.WARNING
        log.log(level, "config check: %s", finding.line())


def _open_store(config: ServiceConfig) -> SqlExecutionStore:
    """The store, or DatabaseOpenError naming the database and the cause in one line."""
    database = config.database
    try:
        cipher = load_cipher(config.encryption.key_file)
    except EncryptionKeyError as exc:
        raise EncryptionKeysError(str(exc)) from None
    if (problem := sqlite_location_problem(database)) is not None:
        raise DatabaseOpenError(f"cannot open database {_redacted(database)}: {problem}")
    try:
        with faults_reported_by_caller():  # the refusal below is the one line
            return SqlExecutionStore(database, cipher=cipher)
    except EncryptionKeyError as exc:
        raise EncryptionKeysError(f"database {_redacted(database)}: {exc}") from None
    except SchemaVersionError as exc:
        raise SchemaError(f"database {_redacted(database)}: {exc}") from None
    except Exception as exc:  # driver, network, auth, filesystem: all end the start
        log.debug("opening the database failed", exc_info=True)
        raise DatabaseOpenError(
            f"cannot open database {_redacted(database)}: {_cause(exc)}"
        ) from exc


async def serve(
    config: ServiceConfig,
    *,
    listen: str | None = None,
    metrics_listen: str | None = None,
    inbox_listen: str | None = None,
    out: TextIO = sys.stdout,
    config_source: str | None = None,
) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully.

    `config_source`: the file `config` was read from, for the start-up summary.
    """
    service = await start_service(
        config,
        listen=listen,
        metrics_listen=metrics_listen,
        inbox_listen=inbox_listen,
        config_source=config_source,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if service.metrics_address is not None:
        print(f"m3grpc metrics on http://{service.metrics_address}/metrics", file=out, flush=True)
    if service.inbox is not None:
        print(f"m3grpc inbox on http://{service.inbox.address}/", file=out, flush=True)
    try:
        workers = WorkerProcesses.start(config, config_source, _log_args())
    except BaseException:
        await service.stop(config.shutdown_grace_seconds)
        raise
    process_memory.freeze_startup_objects()
    process_memory.collect_less_often()
    # Tests and scripts wait for this exact line (printed last).
    print(f"m3grpc serving on {service.address}", file=out, flush=True)
    try:
        await stop.wait()
        log.info("shutting down (grace %.1f s)", config.shutdown_grace_seconds)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        # Together: the service stops taking calls (and reports NOT_SERVING) at once,
        # and both share one grace period. Stopping the worker processes first kept
        # the service serving through their grace, then gave it a grace of its own.
        grace = config.shutdown_grace_seconds
        stopped = await asyncio.gather(
            asyncio.to_thread(workers.stop, grace), service.stop(grace), return_exceptions=True
        )
        for outcome in stopped:
            if isinstance(outcome, BaseException):
                raise outcome


def _log_args() -> list[str]:
    """This process's log level and format, for its worker processes."""
    root = logging.getLogger()
    level = logging.getLevelName(root.getEffectiveLevel()).lower()
    json_format = any(isinstance(h.formatter, JsonFormatter) for h in root.handlers)
    return ["--log-level", level, "--log-format", "json" if json_format else "text"]
