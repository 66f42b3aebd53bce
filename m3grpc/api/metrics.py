"""Prometheus metrics of one service process, served on their own HTTP port.

Counters and histograms move with the runtime's lifecycle events and with every
RPC (the interceptor); gauges are read when scraped: from this process (running
executions, open watches) and from the database (queued executions, rounds per
status, which every replica shares). Labels are method names, status codes,
outcomes and failure codes: never IDs or content.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from m3grpc.api.watch import PendingWatch
from m3grpc.runtime import Runtime
from m3grpc.runtime.lifecycle import LifecycleEvent
from m3grpc.types import ManagedInputStatus

log = logging.getLogger(__name__)

# A round waits for a person: seconds to a day.
_RESPONSE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


class _LiveGauges(Collector):
    """Gauges read at scrape time; a database that cannot be read leaves its
    gauges out of that scrape (and the failure at DEBUG) rather than failing it."""

    def __init__(self, runtime: Runtime, watch: PendingWatch) -> None:
        self._runtime = runtime
        self._watch = watch

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())  # registering must not read the database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "m3_active_executions",
            "Executions this process is running now (waiting for a human included).",
            value=self._runtime.running_executions,
        )
        yield GaugeMetricFamily(
            "m3_waiting_executions",
            "Executions of this process waiting for a human's answer.",
            value=self._runtime.waiting_executions,
        )
        yield GaugeMetricFamily(
            "m3_watchers", "Open WatchPending streams of this process.", value=self._watch.active
        )
        yield GaugeMetricFamily(
            "m3_workers_up",
            "1 while this process's worker pool runs, 0 once it stopped.",
            value=1 if self._runtime.workers_alive else 0,
        )
        try:
            depth = self._runtime.queue_depth()
            counts = self._runtime.rounds_by_status()
        except Exception:
            log.debug("metrics: the database could not be read", exc_info=True)
            return
        yield GaugeMetricFamily(
            "m3_queue_depth", "Queued executions in the database (all replicas).", value=depth
        )
        yield GaugeMetricFamily(
            "m3_pending_rounds",
            "Rounds waiting for an answer in the database (all replicas).",
            value=counts.get(ManagedInputStatus.PENDING.value, 0),
        )
        by_status = GaugeMetricFamily(
            "m3_rounds", "Rounds in the database per status (all replicas).", labels=["status"]
        )
        for status in ManagedInputStatus:
            by_status.add_metric([status.value], counts.get(status.value, 0))
        yield by_status


class ServiceMetrics:
    """The metrics of one service: its own registry, so two services in one
    process (tests) never share counters."""

    def __init__(self) -> None:
        # No `*_created` series next to every counter: they only double the output.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpcs = Counter(
            "m3_rpcs", "RPCs handled, by method and status code.", ["method", "code"], registry=r
        )
        self.rpc_seconds = Histogram(
            "m3_rpc_duration_seconds", "Time to handle an RPC, by method.", ["method"], registry=r
        )
        self.executions_submitted = Counter(
            "m3_executions_submitted", "Executions created by Submit (not replays).", registry=r
        )
        self.executions_finished = Counter(
            "m3_executions_finished",
            "Executions finished by this process, by outcome and failure code.",
            ["outcome", "failure_code"],
            registry=r,
        )
        self.round_transitions = Counter(
            "m3_round_transitions",
            "Rounds that reached a status in this process, by status.",
            ["status"],
            registry=r,
        )
        self.response_seconds = Histogram(
            "m3_round_response_seconds",
            "Time from a round becoming pending to its response being accepted.",
            buckets=_RESPONSE_BUCKETS,
            registry=r,
        )
        self.deliveries = Counter(
            "m3_deliveries", "Answers delivered to the MCP server.", registry=r
        )
        self.delivery_failures = Counter(
            "m3_delivery_failures",
            "Rounds that failed after their answer was handed over for delivery.",
            ["failure_code"],
            registry=r,
        )
        self.recoveries = Counter(
            "m3_recoveries",
            "Executions and rounds failed closed by recovery (their worker was gone).",
            ["kind"],
            registry=r,
        )
        self.lease_losses = Counter(
            "m3_lease_losses",
            "Executions whose worker lost their lease (at a renewal or at the finish).",
            registry=r,
        )
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def track(self, runtime: Runtime, watch: PendingWatch) -> None:
        """Read the live gauges from `runtime` and `watch` and count its events."""
        self.registry.register(_LiveGauges(runtime, watch))
        runtime.lifecycle.subscribe(self.on_event)

    # -- observers ---------------------------------------------------------------------

    def on_rpc(self, method: str, code: str, seconds: float) -> None:
        self.rpcs.labels(method, code).inc()
        self.rpc_seconds.labels(method).observe(seconds)

    def on_event(self, event: LifecycleEvent) -> None:
        fields = event.fields
        handler = self._handlers().get(event.name)
        if handler is not None:
            handler(fields)

    def _handlers(self) -> dict[str, Callable[[Any], None]]:
        return {
            "execution.submitted": self._submitted,
            "execution.finished": lambda f: self.executions_finished.labels(
                str(f["outcome"]), str(f["failure_code"] or "")
            ).inc(),
            "execution.lease_lost": lambda f: self.lease_losses.inc(),
            "execution.recovered": lambda f: self.recoveries.labels("execution").inc(),
            "round.recovered": lambda f: self.recoveries.labels("round").inc(),
            "round.pending": lambda f: self.round_transitions.labels("pending").inc(),
            "round.response_accepted": self._accepted,
            "round.delivered": self._delivered,
            "round.resolved": lambda f: self.round_transitions.labels("resolved").inc(),
            "round.failed": self._failed,
        }

    def _submitted(self, fields: Any) -> None:
        if not fields["replayed"]:
            self.executions_submitted.inc()

    def _accepted(self, fields: Any) -> None:
        if fields["replayed"]:
            return
        self.round_transitions.labels("response_validated").inc()
        if fields["wait_seconds"] is not None:
            self.response_seconds.observe(max(0.0, float(fields["wait_seconds"])))

    def _delivered(self, fields: Any) -> None:
        self.round_transitions.labels("delivered").inc()
        self.deliveries.inc()

    def _failed(self, fields: Any) -> None:
        self.round_transitions.labels("failed").inc()
        if fields["answered"]:
            self.delivery_failures.labels(str(fields["failure_code"])).inc()

    # -- the HTTP endpoint -----------------------------------------------------------------

    def serve(self, address: str) -> str:
        """Serve /metrics on HOST:PORT (port 0: any free port); returns HOST:PORT bound."""
        host, _, port = address.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        self._server, self._thread = start_http_server(int(port), addr=host, registry=self.registry)
        bound = self._server.server_address[1]
        return f"{address.rpartition(':')[0]}:{bound}"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
