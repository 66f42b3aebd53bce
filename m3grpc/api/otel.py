"""OpenTelemetry tracing for `m3grpc serve` (the `tracing` extra), imported only
when `[tracing] enabled = true`.

`install_tracing` sets up the SDK (an OTLP exporter, the standard OTEL_*
variables honoured), makes it the global tracer provider (so the MCP SDK's own
`MCP send tools/call ...` spans join our traces), and installs `OtelTracer`
as the runtime's tracer (`m3grpc.tracing`). `TracingInterceptor` opens one
SERVER span per RPC, continuing the W3C trace context of the call's metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from m3grpc import tracing
from m3grpc.api.config import TracingSection
from m3grpc.api.interceptors import WrappingInterceptor, wrap_handler
from m3grpc.api.rpc_log import _code_name

_INSTRUMENTATION = "m3grpc"


def _clean(attributes: Mapping[str, tracing.AttributeValue | None] | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if v is not None}


def _context_of(carrier: tracing.Carrier | None) -> otel_context.Context | None:
    """The context a stored carrier names; None when it names no valid span."""
    if not carrier:
        return None
    extracted = propagate.extract(dict(carrier))
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


def _link(carrier: tracing.Carrier | None) -> Link | None:
    extracted = _context_of(carrier)
    if extracted is None:
        return None
    return Link(trace.get_current_span(extracted).get_span_context())


class OtelSpan:
    """`m3grpc.tracing.Span` on an OpenTelemetry span."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set_attribute(self, key: str, value: tracing.AttributeValue | None) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def add_event(
        self, name: str, attributes: Mapping[str, tracing.AttributeValue] | None = None
    ) -> None:
        self._span.add_event(name, dict(attributes or {}))

    def add_link(self, carrier: tracing.Carrier | None) -> None:
        link = _link(carrier)
        if link is not None:
            self._span.add_link(link.context)

    def fail(self, code: str) -> None:
        self._span.set_attribute("m3.failure_code", code)
        self._span.set_status(Status(StatusCode.ERROR, code))

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        with trace.use_span(self._span, end_on_exit=False):
            yield

    def end(self) -> None:
        self._span.end()


class OtelTracer:
    """`m3grpc.tracing.Tracer` on an OpenTelemetry tracer."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        parent: tracing.Carrier | None = None,
        links: Sequence[tracing.Carrier] = (),
        attributes: Mapping[str, tracing.AttributeValue | None] | None = None,
    ) -> Iterator[tracing.Span]:
        found = [link for link in map(_link, links) if link is not None]
        with self._tracer.start_as_current_span(
            name,
            context=_context_of(parent),
            links=found,
            attributes=_clean(attributes),
            # Exception messages may quote content: only the type is recorded.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield OtelSpan(span)
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
                raise

    def start(
        self,
        name: str,
        *,
        attributes: Mapping[str, tracing.AttributeValue | None] | None = None,
    ) -> tracing.Span:
        return OtelSpan(self._tracer.start_span(name, attributes=_clean(attributes)))

    def carrier(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        if trace.get_current_span().get_span_context().is_valid:
            propagate.inject(carrier)
        return carrier


def _exporter(section: TracingSection) -> SpanExporter:
    """The OTLP exporter; unset keys leave the OTEL_EXPORTER_OTLP_* variables in charge."""
    if section.resolved_protocol() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=section.endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter(endpoint=section.endpoint)


def install_tracing(section: TracingSection) -> TracerProvider:
    """The SDK set up and installed for the service and the runtime; `shutdown()`
    the returned provider to flush the last spans."""
    # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME are read by Resource.create;
    # the configured name wins over both, and "m3grpc" stands in for none.
    resource = Resource.create({})
    name = resource.attributes.get(SERVICE_NAME)
    if section.service_name or not name or str(name).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: section.resolved_service_name()}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter(section)))
    # Global, so the MCP SDK's spans are exported too (OpenTelemetry keeps the
    # first provider a process sets; ours use `provider` directly).
    trace.set_tracer_provider(provider)
    tracing.install(OtelTracer(provider.get_tracer(_INSTRUMENTATION)))
    return provider


class TracingInterceptor(WrappingInterceptor):
    """One SERVER span per RPC (`rpc.*` attributes, the status code), child of the
    trace context in the call's metadata (W3C `traceparent`/`tracestate`).

    Ours rather than the contrib aio interceptor: that one misses the codes our
    typed errors set through `abort_with_status`. Health checks are not traced.
    """

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer = provider.get_tracer(_INSTRUMENTATION)

    def wrap(self, handler: Any, method: str, details: Any) -> Any:
        if method.startswith("/grpc.health."):
            return handler
        carrier = {
            key: value
            for key, value in (details.invocation_metadata or ())
            if isinstance(value, str)
        }
        # Stream-stream calls (reflection) are not traced.
        return wrap_handler(
            handler, lambda context: self._traced(method, carrier, context), stream_stream=False
        )

    @contextlib.contextmanager
    def _server_span(self, method: str, carrier: Mapping[str, str]) -> Iterator[trace.Span]:
        service, _, name = method.lstrip("/").rpartition("/")
        with self._tracer.start_as_current_span(
            method.lstrip("/"),
            context=propagate.extract(dict(carrier)),
            kind=SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

    @staticmethod
    def _finish(span: trace.Span, context: Any, default: grpc.StatusCode, started: float) -> None:
        code = _code_name(context, default)
        number = grpc.StatusCode[code].value[0]
        span.set_attribute("rpc.grpc.status_code", number)
        span.set_attribute("m3.duration_ms", (time.monotonic() - started) * 1000)
        if code != "OK":
            span.set_status(Status(StatusCode.ERROR, code))

    @contextlib.asynccontextmanager
    async def _traced(
        self, method: str, carrier: Mapping[str, str], context: Any
    ) -> AsyncIterator[None]:
        started = time.monotonic()
        default = grpc.StatusCode.OK
        with self._server_span(method, carrier) as span:
            try:
                yield
            except asyncio.CancelledError:
                default = grpc.StatusCode.CANCELLED
                raise
            except BaseException:
                default = grpc.StatusCode.UNKNOWN
                raise
            finally:
                self._finish(span, context, default, started)


def uninstall_tracing(provider: TracerProvider) -> None:
    """Export the last spans and stop; the runtime's tracer is the no-op again."""
    tracing.install(None)
    provider.shutdown()
