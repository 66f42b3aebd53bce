"""What a configuration will do, checked before serving: `m3grpc check-config` prints it,
`m3grpc serve` logs it at INFO on start.

Checks beyond the config model's own validation: that `serve` would not refuse the
address (beyond loopback without TLS and authentication) and can read `[tls]`'s files;
each stdio binding's command
exists (on PATH, or as a path) and its `cwd` is a directory, and a Python interpreter
there can import what the server's script imports (`interpreter_check`); each HTTP binding's
URL has a host and a valid port; the database can be reached and its schema is
one this version serves (see m3grpc/storage/schema_version.py).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from m3grpc.api.config import ServiceConfig, exposure_problem
from m3grpc.api.interpreter_check import is_python, missing_modules
from m3grpc.errors import EncryptionKeyError, StorageUnavailableError
from m3grpc.runtime import SchemaStatus, faults_reported_by_caller, inspect_database, load_cipher
from m3grpc.servers import HttpServer, ServerBinding, StdioServer, stdio_environment


class Level(StrEnum):
    OK = "ok"
    ERROR = "error"


@dataclass(frozen=True)
class Finding:
    level: Level
    subject: str  # "database", "server shipping (stdio)", ...
    detail: str

    def line(self) -> str:
        return f"{self.level.value:<5} {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Preflight:
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(finding for finding in self.findings if finding.level is Level.ERROR)

    def lines(self) -> list[str]:
        return [finding.line() for finding in self.findings]


def preflight(
    config: ServiceConfig,
    source: str | None,
    *,
    database: SchemaStatus | None = None,
    check_database: bool = True,
    listen: str | None = None,
    inbox_listen: str | None = None,
) -> Preflight:
    """Every finding for `config` (read from `source`, None for the defaults).

    `database`: the schema status already known (serve has opened the store);
    otherwise the database is inspected when `check_database` is set. `listen`,
    `inbox_listen`: the addresses served, when options override the config's.
    """
    findings = [
        Finding(Level.OK, "config", source or "(built-in defaults)"),
        listen_finding(config, listen or config.listen, inbox_listen or config.inbox.listen),
        Finding(Level.OK, "workers", _workers(config)),
    ]
    if config.tls is not None:
        findings.append(tls_finding(config))
    if database is not None:
        findings.append(_database_finding(config.database, database))
    elif check_database:
        findings.append(database_finding(config.database))
    if not config.servers:
        findings.append(Finding(Level.OK, "servers", "none bound (Submit names no server)"))
    findings.extend(binding_finding(binding) for binding in config.servers.values())
    if config.tracing.enabled:
        findings.append(tracing_finding(config))
    findings.append(encryption_finding(config))
    return Preflight(tuple(findings))


def listen_finding(config: ServiceConfig, listen: str, inbox_listen: str | None) -> Finding:
    """The address served, or why serve would refuse it (and the web inbox's):
    beyond loopback without TLS and authentication (`exposure_problem`)."""
    problem = exposure_problem(config, listen, inbox_listen)
    if problem is not None:
        return Finding(Level.ERROR, "listen", problem)
    return Finding(Level.OK, "listen", listen)


def tls_finding(config: ServiceConfig) -> Finding:
    """Whether `[tls]`'s files can be read (serve reads them at start)."""
    assert config.tls is not None
    files = [("cert", config.tls.cert), ("key", config.tls.key)]
    if config.tls.client_ca is not None:
        files.append(("client_ca", config.tls.client_ca))
    for name, path in files:
        try:
            Path(path).read_bytes()
        except OSError as exc:
            return Finding(Level.ERROR, "tls", f"{name} {path}: {exc.strerror or exc}")
    return Finding(Level.OK, "tls", ", ".join(f"{name} {path}" for name, path in files))


def encryption_finding(config: ServiceConfig) -> Finding:
    """Whether stored answers are encrypted, and with which key IDs (never a key)."""
    try:
        cipher = load_cipher(config.encryption.key_file)
    except EncryptionKeyError as exc:
        return Finding(Level.ERROR, "encryption", str(exc))
    if cipher is None:
        return Finding(Level.OK, "encryption", "off: answers are stored in plaintext")
    return Finding(
        Level.OK,
        "encryption",
        f"answers sealed with key {cipher.current_key_id!r}; "
        f"readable with {', '.join(repr(k) for k in cipher.key_ids)}",
    )


def _sdk_installed() -> bool:
    # find_spec imports no SDK module, only looks for it.
    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except (ImportError, ValueError):  # no `opentelemetry` package at all
        return False


def tracing_finding(config: ServiceConfig) -> Finding:
    """Where traces go, or an error when the `tracing` extra is not installed."""
    section = config.tracing
    if not _sdk_installed():
        return Finding(
            Level.ERROR, "tracing", "enabled but not installed: pip install 'm3grpc[tracing]'"
        )
    target = redact_url(section.endpoint) if section.endpoint else "per OTEL_EXPORTER_OTLP_*"
    return Finding(
        Level.OK,
        "tracing",
        f"OTLP {section.resolved_protocol()} to {target}, "
        f"service {section.resolved_service_name()}",
    )


def _workers(config: ServiceConfig) -> str:
    workers = config.workers
    capacity = "unbounded" if workers.queue_capacity is None else str(workers.queue_capacity)
    return (
        f"pool_size {workers.pool_size}, lease {workers.lease_seconds:g} s, "
        f"queue_capacity {capacity}"
    )


def database_finding(database: str) -> Finding:
    """Whether `database` can be reached, and where its schema stands."""
    try:
        with faults_reported_by_caller():  # the finding below reports it
            status = inspect_database(database)
    except Exception as exc:  # driver, network, auth, filesystem
        return Finding(Level.ERROR, "database", f"{redact_url(database)}: {describe_cause(exc)}")
    return _database_finding(database, status)


def _database_finding(database: str, status: SchemaStatus) -> Finding:
    level = Level.OK if status.servable else Level.ERROR
    return Finding(level, "database", f"{redact_url(database)}: {status.describe()}")


def binding_finding(binding: ServerBinding) -> Finding:
    if isinstance(binding, StdioServer):
        return _stdio_finding(binding)
    return _http_finding(binding)


def _stdio_finding(binding: StdioServer) -> Finding:
    subject = f"server {binding.name} (stdio)"
    if binding.cwd is not None and not Path(binding.cwd).is_dir():
        return Finding(Level.ERROR, subject, f"cwd {binding.cwd} is not a directory")
    command = binding.command
    if os.sep in command:
        # A path: relative ones are resolved in the binding's cwd, as the subprocess is.
        path = Path(binding.cwd or ".") / command
        if not (path.is_file() and os.access(path, os.X_OK)):
            return Finding(Level.ERROR, subject, f"command {command} is not an executable file")
        found = str(path)
    else:
        # The PATH the server starts with (the service's own environment first, see
        # stdio_environment), which is where the spawn looks the command up.
        search = stdio_environment(binding).get("PATH", os.environ.get("PATH", os.defpath))
        which = shutil.which(command, path=search)
        if which is None:
            return Finding(Level.ERROR, subject, f"command {command!r} not found on PATH")
        found = which
    if is_python(command) and (missing := missing_modules(binding, found)) is not None:
        return Finding(Level.ERROR, subject, missing.describe())
    return Finding(Level.OK, subject, " ".join([found, *binding.args]))


def _http_finding(binding: HttpServer) -> Finding:
    subject = f"server {binding.name} (http)"
    parts = urlsplit(binding.url)
    try:
        port = parts.port
    except ValueError as exc:
        return Finding(Level.ERROR, subject, f"url {binding.url}: {exc}")
    if not parts.hostname:
        return Finding(Level.ERROR, subject, f"url {binding.url} has no host")
    if any(char.isspace() for char in binding.url):
        return Finding(Level.ERROR, subject, f"url {binding.url!r} contains whitespace")
    shown = parts._replace(query="", fragment="").geturl()
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return Finding(Level.OK, subject, f"{shown} (port {port})")


def describe_cause(exc: BaseException) -> str:
    """The part of a database error an operator needs, on one line."""
    if isinstance(exc, ImportError) and exc.name:
        return f"its driver module {exc.name!r} is not installed"
    # SQLAlchemy wraps the driver's error and appends SQL and a help URL.
    if isinstance(exc, StorageUnavailableError) and exc.__cause__ is not None:
        exc = exc.__cause__  # the driver's own words, for the operator
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException):
        exc = orig
    return " ".join(str(exc).split()) or type(exc).__name__


def redact_url(database: str) -> str:
    """`database` without the password a URL may carry."""
    if "://" not in database:
        return database
    parts = urlsplit(database)
    if parts.password is None:
        return database
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}:***@{hostinfo}"
    return parts._replace(netloc=netloc).geturl()
