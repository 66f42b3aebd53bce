"""The caller's OpenTelemetry trace context, sent with every call as gRPC
metadata (W3C `traceparent`/`tracestate`), so the service's spans join the
caller's trace.

No dependency: only when the application has loaded OpenTelemetry already (it
traces) is its propagator asked; otherwise nothing is imported or sent.
"""

from __future__ import annotations

import sys


def trace_metadata() -> tuple[tuple[str, str], ...] | None:
    """The current trace context as call metadata; None when there is none."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    try:
        from opentelemetry import propagate, trace
    except ImportError:  # pragma: no cover - loaded above, so importable
        return None
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    # gRPC metadata keys are lower case; W3C's are already.
    return tuple((key.lower(), value) for key, value in carrier.items()) or None


def with_trace(
    metadata: tuple[tuple[str, str], ...] | None,
) -> tuple[tuple[str, str], ...] | None:
    """A call's `metadata` (credentials, the caller's own) plus the current trace context."""
    trace = trace_metadata()
    if trace is None:
        return metadata
    return (*(metadata or ()), *trace)
