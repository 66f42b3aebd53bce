"""Who calls the inbox: the service's bearer tokens, sent by the page as
`Authorization: Bearer <token>` on every API request (its live list too: the
page reads the event stream with fetch, which can send the header, not with
EventSource, which cannot).

With tokens configured, an API request without a valid token is UNAUTHENTICATED
(HTTP 401), and a caller sees and answers only its principal's rounds (an admin
every round), exactly as over gRPC: another principal's round is NOT_FOUND. An
answer takes a token of the caller's Respond bucket (`[rate_limits]`), shared
with gRPC Respond. Without tokens, the inbox is open, as the service is.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from m3grpc.api.auth import Authenticator, Principal
from m3grpc.api.rate_limits import RateLimiter


@dataclass(frozen=True)
class Caller:
    """The inbox's caller: a principal, or None when the service has no tokens."""

    principal: Principal | None

    @property
    def name(self) -> str | None:
        return None if self.principal is None else self.principal.name

    @property
    def owner_filter(self) -> str | None:
        """Whose rounds the caller may see: None for all (no authentication, or an admin)."""
        if self.principal is None or self.principal.is_admin:
            return None
        return self.principal.name


class InboxAccess:
    """Authenticates inbox requests and applies the Respond rate limit."""

    def __init__(
        self, authenticator: Authenticator | None = None, limiter: RateLimiter | None = None
    ) -> None:
        self._authenticator = authenticator
        self._limiter = limiter

    @property
    def authenticates(self) -> bool:
        return self._authenticator is not None

    def caller(self, request: Request) -> Caller:
        """The request's caller; UnauthenticatedError when a token is needed and not valid."""
        if self._authenticator is None:
            return Caller(None)
        header = request.headers.get("authorization")
        metadata = [] if header is None else [("authorization", header)]
        return Caller(self._authenticator.authenticate(metadata, {}))

    def check_respond(self, caller: Caller) -> None:
        """RateLimitedError when the caller's Respond bucket is empty."""
        if self._limiter is not None:
            self._limiter.check("Respond", caller.name)
