"""A tiny tracing facade for the runtime and the harnesses: a no-op unless the
service installs a tracer (`m3grpc.api.otel`, when `[tracing]` is enabled).

The runtime and the harnesses never import OpenTelemetry: they open spans here,
and trace context crosses the database as a plain W3C carrier (a dict with
`traceparent` and maybe `tracestate`). Attributes are IDs, names, statuses and
codes: never request or response content.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

AttributeValue = str | int | float | bool
Carrier = Mapping[str, str]


class Span(Protocol):
    def set_attribute(self, key: str, value: AttributeValue | None) -> None: ...

    def add_event(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> None: ...

    def add_link(self, carrier: Carrier | None) -> None: ...

    def fail(self, code: str) -> None:
        """Mark the span failed with an M3 failure code (never a message)."""

    def activate(self) -> contextlib.AbstractContextManager[None]:
        """Make this span the current one (e.g. in a callback's own task)."""

    def end(self) -> None:
        """End a span from `Tracer.start` (spans of `Tracer.span` end themselves)."""


class Tracer(Protocol):
    def span(
        self,
        name: str,
        *,
        parent: Carrier | None = None,
        links: Sequence[Carrier] = (),
        attributes: Mapping[str, AttributeValue | None] | None = None,
    ) -> contextlib.AbstractContextManager[Span]:
        """A span, current inside the block; `parent`: a stored W3C carrier to
        continue (else the current span's child)."""

    def start(
        self,
        name: str,
        *,
        attributes: Mapping[str, AttributeValue | None] | None = None,
    ) -> Span:
        """A span, child of the current one, that lives until its `end()` (e.g. a
        round, from pending to settled); not made current."""

    def carrier(self) -> dict[str, str]:
        """The current trace context as a W3C carrier; empty when none."""


class _NoopSpan:
    def set_attribute(self, key: str, value: AttributeValue | None) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        pass

    def add_link(self, carrier: Carrier | None) -> None:
        pass

    def fail(self, code: str) -> None:
        pass

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        yield

    def end(self) -> None:
        pass


NOOP_SPAN: Span = _NoopSpan()


class _NoopTracer:
    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        parent: Carrier | None = None,
        links: Sequence[Carrier] = (),
        attributes: Mapping[str, AttributeValue | None] | None = None,
    ) -> Iterator[Span]:
        yield NOOP_SPAN

    def start(
        self,
        name: str,
        *,
        attributes: Mapping[str, AttributeValue | None] | None = None,
    ) -> Span:
        return NOOP_SPAN

    def carrier(self) -> dict[str, str]:
        return {}


_NOOP: Tracer = _NoopTracer()
_tracer: Tracer = _NOOP


def install(tracer: Tracer | None) -> None:
    """Use `tracer` from now on (None: back to the no-op)."""
    global _tracer
    _tracer = tracer if tracer is not None else _NOOP


def tracer() -> Tracer:
    return _tracer


def span(
    name: str,
    *,
    parent: Carrier | None = None,
    links: Sequence[Carrier] = (),
    attributes: Mapping[str, AttributeValue | None] | None = None,
) -> contextlib.AbstractContextManager[Span]:
    return _tracer.span(name, parent=parent, links=links, attributes=attributes)


def start(name: str, *, attributes: Mapping[str, AttributeValue | None] | None = None) -> Span:
    return _tracer.start(name, attributes=attributes)


def carrier() -> dict[str, str]:
    return _tracer.carrier()
