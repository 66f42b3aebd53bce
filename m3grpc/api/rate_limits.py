"""Rate limits per principal: a token bucket per (principal, method) for Submit
and Respond, checked by a server interceptor before the handler runs (so before
anything is read or written).

A bucket holds up to `burst` tokens and refills at `per_second`; a call takes
one. A call that finds the bucket empty is refused with RESOURCE_EXHAUSTED
(ErrorInfo reason RATE_LIMITED, metadata `method`, `per_second`, `burst`, never
the principal) and google.rpc.RetryInfo.retry_delay = the time until a token is
back. Nothing else happens: the refused request's ID or idempotency key stays
unused. Without authentication every caller is the anonymous principal and
shares its buckets.

Buckets live in this process (each replica limits on its own) and use the
monotonic clock. There is one per authenticated principal and method, so their
number is bounded by the configured tokens and the certificates the CA signed.
A lock guards them, so that the check stays atomic wherever it is called from
(the event loop's handlers, or a thread).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from grpc_status import rpc_status

from m3grpc.api.auth import principal_name
from m3grpc.api.config import RateLimits
from m3grpc.api.interceptors import WrappingInterceptor, wrap_handler
from m3grpc.errors import RateLimitedError
from m3grpc.wire.gen.m3.v1 import elicitation_service_pb2, execution_service_pb2
from m3grpc.wire.status import status_for

# The full gRPC method names the limits apply to, by the short name errors give.
LIMITED_METHODS = {
    "/"
    + execution_service_pb2.DESCRIPTOR.services_by_name["ExecutionService"].full_name
    + "/Submit": "Submit",
    "/"
    + elicitation_service_pb2.DESCRIPTOR.services_by_name["ElicitationService"].full_name
    + "/Respond": "Respond",
}


@dataclass(frozen=True)
class Rate:
    """A bucket's refill rate (tokens per second) and size."""

    per_second: float
    burst: int


class TokenBucket:
    """Up to `rate.burst` tokens, refilled continuously at `rate.per_second`."""

    def __init__(self, rate: Rate, now: float) -> None:
        self._rate = rate
        self._tokens = float(rate.burst)
        self._updated = now

    def take(self, now: float) -> float:
        """Take a token: 0.0 if one was there, else the seconds until one is (none taken)."""
        elapsed = max(now - self._updated, 0.0)
        self._tokens = min(self._rate.burst, self._tokens + elapsed * self._rate.per_second)
        self._updated = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._rate.per_second


class RateLimiter:
    """The buckets of every (principal, method) with a configured rate."""

    def __init__(
        self, rates: dict[str, Rate], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rates = dict(rates)
        self._clock = clock
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_config(cls, config: RateLimits) -> RateLimiter | None:
        """The limiter `config` asks for, or None when it limits nothing."""
        rates = {}
        for method, per_second, burst in (
            ("Submit", config.submit_per_second, config.submit_burst),
            ("Respond", config.respond_per_second, config.respond_burst),
        ):
            if per_second is not None:
                rates[method] = Rate(per_second, burst or max(1, math.ceil(per_second)))
        return cls(rates) if rates else None

    def limits(self, method: str) -> bool:
        return method in self._rates

    def check(self, method: str, principal: str | None) -> None:
        """Take a token of `principal`'s bucket for `method`, or raise RateLimitedError.

        `principal` None is the anonymous caller (a service without authentication)."""
        rate = self._rates.get(method)
        if rate is None:
            return
        # "" cannot be a configured principal (min_length 1) or a certificate name.
        key = (principal or "", method)
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = TokenBucket(rate, now)
            wait = bucket.take(now)
        if wait > 0.0:
            raise RateLimitedError(
                f"rate limit of {method} reached ({_number(rate.per_second)} per second, "
                f"burst {rate.burst}); retry after the RetryInfo delay",
                retry_after_seconds=wait,
                metadata={
                    "method": method,
                    "per_second": _number(rate.per_second),
                    "burst": str(rate.burst),
                },
            )


def _number(value: float) -> str:
    return f"{value:g}"


class RateLimitInterceptor(WrappingInterceptor):
    """Checks the caller's bucket before Submit and Respond run; after the auth
    interceptor, which sets the caller's principal."""

    def __init__(self, limiter: RateLimiter) -> None:
        self._limiter = limiter

    def wrap(self, handler: Any, method: str, details: Any) -> Any:
        short = LIMITED_METHODS.get(method)
        if short is None or not self._limiter.limits(short):
            return handler

        @contextlib.asynccontextmanager
        async def limited(context: Any) -> AsyncIterator[None]:
            try:
                self._limiter.check(short, principal_name())
            except RateLimitedError as error:
                await context.abort_with_status(rpc_status.to_status(status_for(error)))
                raise AssertionError("abort_with_status returned") from None  # pragma: no cover
            yield

        return wrap_handler(handler, limited)
