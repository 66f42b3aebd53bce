"""The `m3grpc serve` configuration file (TOML).

    database = "m3.sqlite"            # SQLite path or SQLAlchemy URL (postgresql+psycopg://...,
                                      # with the `postgres` extra: m3grpc[server,postgres])
    listen = "127.0.0.1:50051"
    shutdown_grace_seconds = 10.0     # in-flight RPCs and executions get this long on SIGTERM
    watch_poll_interval_seconds = 0.15
    keepalive_seconds = 30.0          # HTTP/2 pings keep idle WatchPending streams alive
    metrics_listen = "127.0.0.1:9464" # Prometheus /metrics on its own port; omit: off
    health_check_interval_seconds = 5.0   # database and worker check behind gRPC health

    [workers]
    pool_size = 4                     # executions run at once in this process
    processes = 1                     # worker processes on the database, the service's included
    poll_interval_seconds = 0.5
    listening_poll_interval_seconds = 10.0   # PostgreSQL: the fallback poll while NOTIFY is heard
    lease_seconds = 30.0
    queue_capacity = 256              # omit for no limit
    # A managed round's deadline when its spec sets no round_timeout, and the
    # longest round_timeout a spec may set (Submit fails INVALID_ARGUMENT above it).
    default_round_timeout_seconds = 86400.0
    max_round_timeout_seconds = 604800.0
    park_after_seconds = 2.0          # a 2026-07-28 round's execution is parked after this

    [limits]                          # input limits, checked before anything is stored
    max_prompt_chars = 100000
    max_tools = 1000                  # entries of an AgentSpec's tool selection
    max_script_steps = 1000
    max_spec_bytes = 1000000          # the whole spec as JSON
    max_json_depth = 20               # nesting of arguments, plan and response content
    max_request_keys = 100            # keys of one Respond call
    max_response_content_bytes = 262144   # all content of one Respond call, as JSON
    max_operation_result_bytes = 262144   # a stored operation result (larger: truncated)
    max_result_bytes = 2000000        # all operation results of an execution's Result

    [servers.shipping]                # stdio: command/args/env/cwd
    command = "python"
    args = ["tests/mcp_servers/shipping.py"]
    env = { LOG_LEVEL = "warning" }
    cwd = "."

    [servers.remote]                  # Streamable HTTP: url/headers
    url = "http://127.0.0.1:8000/mcp"
    headers = { Authorization = "Bearer ..." }

    [tracing]                         # OpenTelemetry traces (needs the `tracing` extra)
    enabled = false                   # off by default: nothing of OpenTelemetry is loaded
    endpoint = "http://127.0.0.1:4318/v1/traces"  # omit: OTEL_EXPORTER_OTLP_* decide
    protocol = "http/protobuf"        # or "grpc"; omit: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL
    service_name = "m3grpc"           # omit: OTEL_SERVICE_NAME, else "m3grpc"
    [inbox]                           # the web inbox (answer rounds in a browser)
    listen = "127.0.0.1:8080"         # its own HTTP port; omit: off
    allow_insecure = false            # serve beyond loopback without TLS and authentication

    [encryption]                      # encrypt stored responses (AES-256-GCM)
    key_file = "m3.keys"              # KEY_ID:BASE64 lines, first encrypts; $M3_ENCRYPTION_KEYS
                                      # (same entries, comma-separated) overrides it

    [tls]                             # serve TLS instead of plaintext
    cert = "server.crt"               # PEM certificate chain
    key = "server.key"                # PEM private key
    client_ca = "clients-ca.crt"      # mutual TLS: verify client certificates with this CA
    require_client_cert = true        # with client_ca: refuse a connection without one

    [auth]                            # once configured, every call needs credentials
    require_for_health = false        # health checking and reflection need them too
    admin_certificates = ["ops"]      # client certificate common names with the admin role
    [[auth.tokens]]                   # a bearer token, stored as its hash only
    principal = "alice"
    role = "user"                     # or "admin": sees every principal's executions
    hash = "sha256:9f86d08..."        # printf %s "$TOKEN" | sha256sum

    [rate_limits]                     # token buckets per principal and method; omit: off
    submit_per_second = 2.0           # Submit calls a principal may make per second, sustained
    submit_burst = 10                 # ... and at once (the bucket's size)
    respond_per_second = 5.0
    respond_burst = 20

    [codex]                           # the `codex` harness (each key overrides M3_CODEX_*)
    binary = "tools/codex/node_modules/.../codex"   # default: scripts/setup-codex.sh's install
    base_url = "https://provider.example/v1"        # a Responses API provider; omit for OpenAI
    env_key = "OPENAI_API_KEY"        # the variable (in the service's environment) with the key
    auth_home = "~/.codex"            # a signed-in CODEX_HOME whose auth.json is copied

    [claude_code]                     # the `claude-code` harness (overrides M3_CLAUDE_CODE_*)
    binary = "tools/claude-code/node_modules/.../claude"  # default: setup-claude-code.sh's
    base_url = "https://provider.example"           # a Messages API; omit for Anthropic's
    env_key = "ANTHROPIC_API_KEY"     # the variable (in the service's environment) with the key

Every key is optional. Relative paths (database, cwd, TLS files) are relative to the
service's working directory. A binding may also set `protocol` ("auto",
"legacy" or "2026-07-28") and `roots` (what a server's `roots/list` is answered
with, e.g. `roots = [{ uri = "file:///srv/project", name = "project" }]`; empty
by default). Clients only ever name a binding.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from m3grpc.runtime import ClaudeCodeSettings, CodexSettings, WorkerSettings
from m3grpc.runtime.limits import Limits
from m3grpc.servers import HttpServer, ServerBinding, StdioServer

DEFAULT_DATABASE = "m3.sqlite"
DEFAULT_LISTEN = "127.0.0.1:50051"


class ConfigError(ValueError):
    """The configuration file is missing, unreadable or invalid."""


class _Section(BaseModel):
    # No infinite or NaN durations: each becomes a timedelta, a gRPC channel argument
    # or a deadline somewhere, none of which holds one.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Workers(_Section):
    pool_size: int = Field(default=4, ge=0, description="Executions this process runs at once.")
    processes: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Processes running workers on the database, the service's included "
        "(each with pool_size); more than 1 uses more cores.",
    )
    poll_interval_seconds: float = Field(
        default=0.5,
        gt=0,
        description="How often workers poll the queue and responses for writes of other replicas.",
    )
    listening_poll_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        description="PostgreSQL: while this replica hears the others' changes (LISTEN/NOTIFY), "
        "waits (workers, results, WatchPending) poll only this often, as a fallback.",
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        description="The worker lease; recovery fails (or hands on) the work of a replica "
        "whose lease ran out.",
    )
    queue_capacity: int | None = Field(
        default=None,
        ge=0,
        description="Queued executions before Submit answers RESOURCE_EXHAUSTED; unset: no limit.",
    )
    # An abandoned round must not wait forever: a default deadline, and a maximum.
    default_round_timeout_seconds: float | None = Field(
        default=86_400.0,
        gt=0,
        le=315_360_000,  # ten years; a timedelta holds no more than 2.7 million
        description="A managed round's deadline when its spec sets no round_timeout.",
    )
    max_round_timeout_seconds: float | None = Field(
        default=604_800.0,
        gt=0,
        le=315_360_000,  # ten years; a timedelta holds no more than 2.7 million
        description="The longest round_timeout a spec may set (Submit fails INVALID_ARGUMENT "
        "above it).",
    )

    park_after_seconds: float | None = Field(
        default=2.0,
        ge=0,
        le=86_400,
        description="How long a 2026-07-28 round waits for its answer in its worker before "
        "the execution is parked (no task, no lease: only its rows) until the answer or "
        "its deadline; unset: never parked.",
    )

    @model_validator(mode="after")
    def _default_within_maximum(self) -> Workers:
        default, maximum = self.default_round_timeout_seconds, self.max_round_timeout_seconds
        if default is not None and maximum is not None and default > maximum:
            raise ValueError("default_round_timeout_seconds exceeds max_round_timeout_seconds")
        return self

    def settings(self) -> WorkerSettings:
        default = self.default_round_timeout_seconds
        return WorkerSettings(
            concurrency=self.pool_size,
            lease_duration=timedelta(seconds=self.lease_seconds),
            poll_interval=self.poll_interval_seconds,
            listening_poll_interval=self.listening_poll_interval_seconds,
            default_round_timeout=timedelta(seconds=default) if default else None,
            park_after=self.park_after_seconds,
        )


def check_listen(address: str) -> str:
    """`address` if it is HOST:PORT with a port in 0-65535 (0: any free port).

    gRPC itself would take port 99999 modulo 2**16 or bind a random port, and
    serve somewhere nobody asked for; refusing here makes that a startup error.
    """
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise ValueError(f"{address!r} is not HOST:PORT")
    if not port.isascii() or not port.isdigit():
        raise ValueError(f"{address!r} has no numeric port")
    if int(port) > 65535:
        raise ValueError(f"port {port} of {address!r} is out of range (0-65535)")
    return address


class Codex(_Section):
    binary: str | None = Field(
        default=None,
        description="The Codex CLI; default: M3_CODEX_BIN, else scripts/setup-codex.sh's install.",
    )
    base_url: str | None = Field(
        default=None,
        description="A Responses API base URL (M3_CODEX_BASE_URL); unset: OpenAI.",
    )
    env_key: str | None = Field(
        default=None,
        description="The variable of the service's environment holding the API key "
        "(M3_CODEX_ENV_KEY); only that one is passed to Codex.",
    )
    auth_home: str | None = Field(
        default=None,
        description="A signed-in CODEX_HOME whose auth.json is copied (M3_CODEX_AUTH_HOME).",
    )

    def settings(self) -> CodexSettings:
        base = CodexSettings.from_env()
        return CodexSettings(
            binary=self.binary or base.binary,
            base_url=self.base_url or base.base_url,
            env_key=self.env_key or base.env_key,
            auth_home=Path(self.auth_home).expanduser() if self.auth_home else base.auth_home,
        )


class ClaudeCode(_Section):
    binary: str | None = Field(
        default=None,
        description="The Claude Code CLI; default: M3_CLAUDE_CODE_BIN, else "
        "scripts/setup-claude-code.sh's install.",
    )
    base_url: str | None = Field(
        default=None,
        description="An Anthropic Messages API base URL (M3_CLAUDE_CODE_BASE_URL); "
        "unset: Anthropic's.",
    )
    env_key: str | None = Field(
        default=None,
        description="The variable of the service's environment holding the API key "
        "(M3_CLAUDE_CODE_ENV_KEY; default ANTHROPIC_API_KEY); only its value is passed "
        "to the CLI.",
    )

    def settings(self) -> ClaudeCodeSettings:
        base = ClaudeCodeSettings.from_env()
        return ClaudeCodeSettings(
            binary=self.binary or base.binary,
            base_url=self.base_url or base.base_url,
            env_key=self.env_key or base.env_key,
        )


OtlpProtocol = Literal["grpc", "http/protobuf"]
OTLP_PROTOCOLS: tuple[OtlpProtocol, ...] = ("grpc", "http/protobuf")


class TracingSection(_Section):
    """`[tracing]`: OTLP trace export. The standard OTEL_* variables (endpoint,
    headers, protocol, sampler, resource attributes) apply to what is unset here."""

    enabled: bool = Field(
        default=False, description="Export traces; off: nothing of OpenTelemetry is loaded."
    )
    endpoint: str | None = Field(
        default=None,
        description="OTLP endpoint, e.g. http://127.0.0.1:4318/v1/traces; unset: "
        "OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT decide.",
    )
    protocol: OtlpProtocol | None = Field(
        default=None,
        description='"http/protobuf" or "grpc"; unset: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, '
        'else "http/protobuf".',
    )
    service_name: str | None = Field(
        default=None,
        description='The service.name resource; unset: OTEL_SERVICE_NAME, else "m3grpc".',
    )

    def resolved_protocol(self, env: Mapping[str, str] = os.environ) -> OtlpProtocol:
        """The configured protocol, else the OTEL_* variables', else http/protobuf."""
        if self.protocol is not None:
            return self.protocol
        for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            value = env.get(name, "").strip()
            if value == "grpc":
                return "grpc"
            if value:
                return "http/protobuf"
        return "http/protobuf"

    def resolved_service_name(self, env: Mapping[str, str] = os.environ) -> str:
        return self.service_name or env.get("OTEL_SERVICE_NAME") or "m3grpc"


class LimitsSection(_Section):
    """`[limits]`: see m3grpc/runtime/limits.py (defaults there)."""

    max_prompt_chars: int = Field(
        default=Limits.max_prompt_chars, ge=1, description="Characters of AgentSpec.prompt."
    )
    max_tools: int = Field(
        default=Limits.max_tools, ge=1, description="Entries of AgentSpec.tools."
    )
    max_script_steps: int = Field(
        default=Limits.max_script_steps, ge=1, description="Steps of AgentSpec.script."
    )
    max_spec_bytes: int = Field(
        default=Limits.max_spec_bytes, ge=1, description="A whole spec, as JSON."
    )
    max_json_depth: int = Field(
        default=Limits.max_json_depth,
        ge=1,
        le=64,
        description="Nesting of arguments, plan content and response content.",
    )
    max_request_keys: int = Field(
        default=Limits.max_request_keys, ge=1, description="Request keys of one Respond."
    )
    # Kept well under gRPC's 4 MB message limit, so every record stays readable.
    max_response_content_bytes: int = Field(
        default=Limits.max_response_content_bytes,
        ge=1,
        le=1_000_000,
        description="All content of one Respond, as JSON.",
    )
    max_operation_result_bytes: int = Field(
        default=Limits.max_operation_result_bytes,
        ge=1,
        le=1_000_000,
        description="One stored operation result (larger: stored truncated).",
    )
    max_result_bytes: int = Field(
        default=Limits.max_result_bytes,
        ge=1,
        le=3_000_000,
        description="All operation results of one execution (past it: omitted).",
    )


class Inbox(_Section):
    """`[inbox]`: the web inbox's HTTP listen address (None: no inbox)."""

    listen: str | None = Field(
        default=None,
        description="HOST:PORT of the web inbox (its own HTTP port); unset: off "
        "(--inbox-listen overrides it). It takes the [auth] bearer tokens; without "
        "them keep it on loopback.",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        return None if value is None else check_listen(value)


class Encryption(_Section):
    """`[encryption]`: where the keys that encrypt stored responses are. Keys never
    sit in this file: a key file path here, or $M3_ENCRYPTION_KEYS (which wins)."""

    key_file: str | None = Field(
        default=None,
        description="A file of KEY_ID:BASE64 lines (32-byte keys, the first encrypts, all "
        "decrypt); $M3_ENCRYPTION_KEYS overrides it. Unset with no variable: plaintext.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_keys_inline(cls, value: Any) -> Any:
        if isinstance(value, Mapping) and "keys" in value:
            raise ValueError(
                "keys are not read from the configuration file: set key_file "
                "(a file only the service can read) or $M3_ENCRYPTION_KEYS"
            )
        return value


class Tls(_Section):
    """`[tls]`: the server's certificate and key, and optionally a client CA (mTLS)."""

    cert: str = Field(description="PEM certificate chain of the server.")
    key: str = Field(description="PEM private key of the server.")
    client_ca: str | None = Field(
        default=None, description="Mutual TLS: verify client certificates with this CA (PEM)."
    )
    require_client_cert: bool = Field(
        default=True, description="With client_ca: refuse a connection without a certificate."
    )

    @property
    def verifies_clients(self) -> bool:
        """Whether every connection must present a client certificate the CA signed."""
        return self.client_ca is not None and self.require_client_cert


_HASH = re.compile(r"sha256:[0-9a-f]{64}")


class Token(_Section):
    """One bearer token of `[[auth.tokens]]`: who it is and the SHA-256 of the secret."""

    principal: str = Field(
        min_length=1, max_length=200, description="Who the token is; owns what it submits."
    )
    role: Literal["user", "admin"] = Field(
        default="user", description='"admin" sees and acts on every principal\'s executions.'
    )
    hash: str = Field(description="sha256:<64 hex digits> of the token (m3grpc hash-token).")

    @field_validator("hash")
    @classmethod
    def _hash(cls, value: str) -> str:
        # Only a hash is accepted, so a plaintext token in the file is an error
        # (which never echoes the value).
        value = value.strip().lower()
        if not _HASH.fullmatch(value):
            raise ValueError("must be sha256:<64 hex digits> (the SHA-256 of the token)")
        return value


class Auth(_Section):
    """`[auth]`: bearer tokens, certificate principals, and what stays open."""

    tokens: tuple[Token, ...] = Field(
        default=(), description="The bearer tokens ([[auth.tokens]])."
    )
    require_for_health: bool = Field(
        default=False, description="Health checking and reflection need credentials too."
    )
    admin_certificates: tuple[str, ...] = Field(
        default=(), description="Client certificate common names with the admin role."
    )

    @field_validator("tokens")
    @classmethod
    def _unique(cls, tokens: tuple[Token, ...]) -> tuple[Token, ...]:
        if len({token.hash for token in tokens}) != len(tokens):
            raise ValueError("two tokens have the same hash")
        return tokens


class RateLimits(_Section):
    """`[rate_limits]`: a token bucket per (principal, method) for Submit and Respond.

    A method whose `*_per_second` is unset is not limited. A refused call gets
    RESOURCE_EXHAUSTED (RATE_LIMITED, RetryInfo) and changes nothing."""

    submit_per_second: float | None = Field(
        default=None,
        gt=0,
        description="Submit calls one principal may make per second, sustained (the bucket's "
        "refill rate); unset: Submit is not limited. Without authentication every caller "
        "shares one bucket.",
    )
    submit_burst: int | None = Field(
        default=None,
        ge=1,
        description="Submit calls one principal may make at once (the bucket's size); "
        "unset: submit_per_second rounded up.",
    )
    respond_per_second: float | None = Field(
        default=None,
        gt=0,
        description="Respond calls one principal may make per second, sustained; unset: "
        "Respond is not limited.",
    )
    respond_burst: int | None = Field(
        default=None,
        ge=1,
        description="Respond calls one principal may make at once; unset: respond_per_second "
        "rounded up.",
    )


def is_loopback(address: str) -> bool:
    """Whether HOST:PORT listens on loopback only (127.0.0.0/8, ::1, localhost)."""
    host = address.rpartition(":")[0].removeprefix("[").removesuffix("]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # another host name: it may resolve anywhere


def exposure_problem(config: ServiceConfig, address: str, inbox_address: str | None) -> str | None:
    """Why serving `address` (and the web inbox on `inbox_address`) would be refused,
    or None: beyond loopback without TLS and authentication, unless the configuration
    says `allow_insecure = true`. Anyone who can reach the port could read every
    answer, and a bearer token in plaintext can be read on the way. The web inbox
    authenticates with the bearer tokens of `[auth]`: beyond loopback without them,
    it needs `allow_insecure` (or a proxy in front of a loopback inbox)."""
    if config.allow_insecure:
        return None
    if inbox_address is not None and not is_loopback(inbox_address) and not config.auth.tokens:
        return (
            f"refusing to serve the web inbox on {inbox_address} without bearer tokens: "
            "configure [[auth.tokens]], keep it on 127.0.0.1 (behind an authenticating "
            "proxy) or set allow_insecure = true"
        )
    if is_loopback(address):
        return None
    missing = [
        what
        for what, present in (
            ("TLS", config.tls is not None),
            ("authentication", config.authenticates),
        )
        if not present
    ]
    if missing:
        return (
            f"refusing to serve on {address} without {' and '.join(missing)}: configure "
            "[tls] and [auth] (see docs/guides/security.md), listen on 127.0.0.1, "
            "or set allow_insecure = true"
        )
    return None


class ServiceConfig(_Section):
    database: str = Field(
        default=DEFAULT_DATABASE,
        description="An SQLite file path, or a SQLAlchemy URL such as "
        "postgresql+psycopg://user@host/m3 (needs the `.[postgres]` extra) for several replicas.",
    )
    listen: str = Field(
        default=DEFAULT_LISTEN,
        description="HOST:PORT the gRPC API listens on; port 0 takes any free port "
        "(the ready line prints it). --listen overrides it.",
    )
    shutdown_grace_seconds: float = Field(
        default=10.0,
        ge=0,
        description="On SIGTERM/SIGINT, how long in-flight calls and executions get to finish.",
    )
    watch_poll_interval_seconds: float = Field(
        default=0.15,
        gt=0,
        description="How often an idle WatchPending stream polls the event log "
        "(for writes of other replicas).",
    )
    keepalive_seconds: float = Field(
        default=30.0,
        gt=0,
        # gRPC takes it in milliseconds as a 32-bit integer.
        le=2_147_483,
        description="HTTP/2 keepalive pings, so idle WatchPending streams survive proxies.",
    )
    metrics_listen: str | None = Field(
        default=None,
        description="HOST:PORT of the Prometheus /metrics endpoint; unset: off "
        "(--metrics-listen overrides it).",
    )
    health_check_interval_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often the gRPC health status is re-checked "
        "(database reachable, workers running).",
    )
    workers: Workers = Field(default_factory=Workers, description="The worker pool.")
    limits: LimitsSection = Field(
        default_factory=LimitsSection,
        description="Input limits, checked before anything is stored "
        "(INVALID_ARGUMENT with a field violation).",
    )
    servers: Mapping[str, ServerBinding] = Field(
        default_factory=dict,
        description="The MCP server bindings, by name; clients only ever name one.",
    )
    codex: Codex = Field(
        default_factory=Codex,
        description="The `codex` harness; each key overrides the M3_CODEX_* variable.",
    )
    claude_code: ClaudeCode = Field(
        default_factory=ClaudeCode,
        description="The `claude-code` harness; each key overrides the M3_CLAUDE_CODE_* variable.",
    )
    tracing: TracingSection = Field(
        default_factory=TracingSection,
        description="OpenTelemetry traces (the `tracing` extra); off by default.",
    )
    inbox: Inbox = Field(
        default_factory=Inbox,
        description="The web inbox (answer rounds in a browser); off by default.",
    )
    encryption: Encryption = Field(
        default_factory=Encryption,
        description="Encryption at rest of stored responses (keys from a file or the "
        "environment); off without keys.",
    )
    tls: Tls | None = Field(
        default=None, description="Serve TLS (and optionally verify client certificates)."
    )
    auth: Auth = Field(
        default_factory=Auth,
        description="Bearer tokens and certificate principals; once configured, every call "
        "needs credentials.",
    )
    rate_limits: RateLimits = Field(
        default_factory=RateLimits,
        description="Token buckets per principal for Submit and Respond; off by default.",
    )
    allow_insecure: bool = Field(
        default=False,
        description="Serve beyond loopback without TLS and authentication (refused otherwise).",
    )

    @property
    def authenticates(self) -> bool:
        """Whether calls need credentials (a token, or a verified client certificate)."""
        return bool(self.auth.tokens) or (self.tls is not None and self.tls.verifies_clients)

    @field_validator("database")
    @classmethod
    def _database(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("database must name an SQLite path or a database URL")
        return value

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        return check_listen(value)

    @field_validator("metrics_listen")
    @classmethod
    def _metrics_listen(cls, value: str | None) -> str | None:
        return None if value is None else check_listen(value)

    @field_validator("servers", mode="before")
    @classmethod
    def _bindings(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {name: _binding(name, table) for name, table in value.items()}

    def runtime_limits(self) -> Limits:
        return Limits(
            **self.limits.model_dump(),
            max_round_timeout_seconds=self.workers.max_round_timeout_seconds,
        )


def _binding(name: str, table: Any) -> ServerBinding:
    if isinstance(table, StdioServer | HttpServer):
        return table
    if not isinstance(table, Mapping):
        raise ValueError(f"[servers.{name}] must be a table")
    if "name" in table:  # it would rename the binding its table names
        raise ValueError(f"[servers.{name}] unknown key `name`: the table's name is the binding's")
    fields = {"name": name, **table}
    try:
        if "url" in fields:
            return HttpServer.model_validate(fields)
        if "command" in fields:
            return StdioServer.model_validate(fields)
    except ValidationError as exc:  # named by its table: with several, which one
        raise ValueError(f"[servers.{name}] {_one_line(exc)}") from None
    raise ValueError(f"[servers.{name}] needs `command` (stdio) or `url` (HTTP)")


def load_config(path: str | os.PathLike[str] | None) -> ServiceConfig:
    """The configuration in `path`, or the defaults when `path` is None."""
    if path is None:
        return ServiceConfig()
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {os.fspath(path)}: {exc}") from exc
    try:
        return ServiceConfig.model_validate(document)
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration {os.fspath(path)}: {_one_line(exc)}") from exc


def _one_line(error: ValidationError) -> str:
    # `m3grpc serve` reports a bad file as a single stderr line: each problem
    # as "key.path: message", without pydantic's multi-line layout and URLs.
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {' '.join(message.split())}")
    return "; ".join(problems)
