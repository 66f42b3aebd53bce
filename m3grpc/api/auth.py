"""Who is calling: bearer tokens and client certificates, checked by a server interceptor.

Once the configuration has tokens or requires client certificates, every call
must authenticate (health checking and reflection only if configured so):

- `authorization: Bearer <token>` metadata: the token's SHA-256 is compared with
  every configured hash (hmac.compare_digest, all of them, so the time taken does
  not tell which prefix matched); its principal and role are the caller's.
- otherwise a client certificate the configured CA verified (mutual TLS): its
  subject common name is the principal, role `admin` if listed in
  `auth.admin_certificates`, else `user`.

A call without either gets UNAUTHENTICATED (ErrorInfo reason UNAUTHENTICATED,
metadata `credentials`: `missing` or `invalid`). Tokens are never logged and
never echoed. The caller's Principal is set in `CURRENT_PRINCIPAL` for the
handler (the servicers' tenant isolation reads it).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from grpc_status import rpc_status

from m3grpc.api.config import Auth, ServiceConfig
from m3grpc.api.interceptors import WrappingInterceptor, wrap_handler
from m3grpc.errors import UnauthenticatedError
from m3grpc.wire.status import status_for

Role = Literal["user", "admin"]

# Methods that answer without credentials unless `auth.require_for_health`.
OPEN_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    name: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


# The caller of the RPC being handled; None when the service has no authentication.
CURRENT_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "m3grpc_principal", default=None
)


def current_principal() -> Principal | None:
    return CURRENT_PRINCIPAL.get()


def principal_name() -> str | None:
    """Who a new execution belongs to: the caller, or None without authentication."""
    principal = CURRENT_PRINCIPAL.get()
    return None if principal is None else principal.name


def principal_filter() -> str | None:
    """Whose executions the caller may see: None for all (no auth, or an admin)."""
    principal = CURRENT_PRINCIPAL.get()
    if principal is None or principal.is_admin:
        return None
    return principal.name


def token_hash(token: str) -> str:
    """The `sha256:<hex>` form a token is configured with."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


class Authenticator:
    """Turns a call's metadata and peer certificate into a Principal, or an error."""

    def __init__(self, auth: Auth, *, certificates: bool) -> None:
        self._tokens = [
            (token.hash.encode(), Principal(token.principal, token.role)) for token in auth.tokens
        ]
        self._certificates = certificates
        self._admin_certificates = frozenset(auth.admin_certificates)

    def authenticate(self, metadata: Any, auth_context: dict[str, list[bytes]]) -> Principal:
        header = _authorization(metadata)
        if header is not None:
            scheme, _, token = header.partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise _unauthenticated(
                    "invalid", "the authorization metadata is not `Bearer <token>`"
                )
            principal = self._token_principal(token)
            if principal is None:
                raise _unauthenticated("invalid", "the bearer token is not accepted")
            return principal
        if self._certificates:
            names = auth_context.get("x509_common_name") or []
            if names:
                name = names[0].decode("utf-8", "replace")
                role: Role = "admin" if name in self._admin_certificates else "user"
                return Principal(name, role)
        raise _unauthenticated("missing", "this service requires credentials (a bearer token)")

    def _token_principal(self, token: str) -> Principal | None:
        presented = token_hash(token).encode()
        found = None
        for configured, principal in self._tokens:  # no early exit: constant work per call
            if hmac.compare_digest(presented, configured):
                found = principal
        return found


def _authorization(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key.lower() == "authorization":
            return value if isinstance(value, str) else bytes(value).decode("latin-1")
    return None


def _unauthenticated(credentials: str, message: str) -> UnauthenticatedError:
    return UnauthenticatedError(message, metadata={"credentials": credentials})


class AuthInterceptor(WrappingInterceptor):
    """Authenticates each call before its handler runs (see the module docstring)."""

    def __init__(self, authenticator: Authenticator, *, protect_health: bool) -> None:
        self._authenticator = authenticator
        self._protect_health = protect_health

    @classmethod
    def for_config(cls, config: ServiceConfig) -> AuthInterceptor | None:
        """The interceptor `config` asks for, or None when it configures no authentication."""
        if not config.authenticates:
            return None
        certificates = config.tls is not None and config.tls.client_ca is not None
        return cls(
            Authenticator(config.auth, certificates=certificates),
            protect_health=config.auth.require_for_health,
        )

    def wrap(self, handler: Any, method: str, details: Any) -> Any:
        if not self._protect_health and method.startswith(OPEN_PREFIXES):
            return handler
        return wrap_handler(handler, self._authenticated)

    async def _principal(self, context: Any) -> Principal:
        try:
            return self._authenticator.authenticate(
                context.invocation_metadata(), context.auth_context()
            )
        except UnauthenticatedError as error:
            await context.abort_with_status(rpc_status.to_status(status_for(error)))
            raise AssertionError("abort_with_status returned") from None  # pragma: no cover

    @contextlib.asynccontextmanager
    async def _authenticated(self, context: Any) -> AsyncIterator[None]:
        CURRENT_PRINCIPAL.set(await self._principal(context))
        yield
