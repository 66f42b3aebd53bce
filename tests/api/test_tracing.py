"""OpenTelemetry tracing of a real `m3grpc serve` (`[tracing]`): the service
exports OTLP/HTTP to a collector this test runs on loopback, and one managed
round makes one trace, from the client's own span through Submit, the worker's
execution, the MCP call and the round to Respond, with the right parents and
no answer content anywhere in the exported data."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from m3grpc.api.config import ConfigError, TracingSection, load_config
from m3grpc.api.preflight import preflight
from m3grpc.client import RemoteMCPTestKit
from m3grpc.client.trace_context import trace_metadata
from m3grpc.devtools.serve_process import ROOT, ServeProcess
from m3grpc.errors import ExecutionNotFoundError
from m3grpc.servers import StdioServer
from m3grpc.types import ElicitationResponse, ExecutionOutcome
from tests.api.conftest import write_config

# A value only the answer carries: it must appear nowhere in the exported spans.
CANARY = "canary-5d1c0a77-lane"


@dataclass(frozen=True)
class ExportedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    attributes: dict[str, Any]
    events: list[str]
    links: list[tuple[str, str]]
    service: str


class Collector:
    """An OTLP/HTTP trace receiver on loopback: keeps every request's raw body
    and its spans."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: list[ExportedSpan] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                collector.receive(self.path, body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def receive(self, path: str, body: bytes) -> None:
        assert path == "/v1/traces", path
        request = ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in request.resource_spans:  # flattened: one list of spans
            service = next(
                (
                    kv.value.string_value
                    for kv in resource_spans.resource.attributes
                    if kv.key == "service.name"
                ),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ExportedSpan(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            name=span.name,
                            attributes={kv.key: _value(kv.value) for kv in span.attributes},
                            events=[event.name for event in span.events],
                            links=[(ln.trace_id.hex(), ln.span_id.hex()) for ln in span.links],
                            service=service,
                        )
                    )
        with self._lock:
            self.bodies.append(body)
            self.spans.extend(spans)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def collector() -> Iterator[Collector]:
    collector = Collector()
    try:
        yield collector
    finally:
        collector.close()


def _traced_config(tmp: Path, endpoint: str, protocol: str = "http/protobuf") -> Path:
    config = write_config(tmp / "m3.toml", tmp / "m3.sqlite")
    with config.open("a") as file:
        file.write(
            "\n[tracing]\nenabled = true\n"
            f"endpoint = {json.dumps(endpoint)}\n"
            f'protocol = "{protocol}"\nservice_name = "m3-under-test"\n'
        )
    return config


def _service_env() -> dict[str, str]:
    # The test's own OTEL_* settings must not redirect the service's export.
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }


def test_one_trace_from_the_client_through_the_round(tmp_path: Path, collector: Collector) -> None:
    config = _traced_config(tmp_path, collector.endpoint)
    server = ServeProcess(config, log=tmp_path / "server.log", env=_service_env()).start()
    # The caller traces too: its spans go to memory, its context on the wire.
    client_spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(client_spans))
    tracer = provider.get_tracer("the-caller")
    try:
        with (
            RemoteMCPTestKit(server.address) as kit,
            tracer.start_as_current_span("checkout") as parent,
        ):
            agent = kit.agents([{"harness": "scripted", "models": []}])[0]
            handle = agent.submit(
                "Ask for the delivery address, then book the shipment.",
                server=StdioServer(name="shipping", command="never-sent"),
                tools=["shipping:book_shipment"],
                human_input="managed",
            )
            pending = None
            deadline = time.monotonic() + 120
            while pending is None and time.monotonic() < deadline:
                pending = handle.pending_elicitation()
                if pending is None:
                    time.sleep(0.2)
            assert pending is not None, "no round came"
            handle.respond_elicitation(
                pending.round_id,
                {
                    "shipping_address": ElicitationResponse(
                        action="accept", content={"street": CANARY, "city": "Pune"}
                    )
                },
                idempotency_key="trace-1",
            )
            result = handle.result(timeout=120)
            # A call that fails: its span carries the code.
            with pytest.raises(ExecutionNotFoundError):
                kit.handle("exe_missing").snapshot()
        assert result.outcome is ExecutionOutcome.SUCCEEDED
    finally:
        # SIGTERM: the service flushes its last spans before it exits.
        assert server.stop() == 0

    trace_id = format(parent.get_span_context().trace_id, "032x")
    parent_id = format(parent.get_span_context().span_id, "016x")
    assert [span.name for span in client_spans.get_finished_spans()] == ["checkout"]
    spans = [span for span in collector.spans if span.trace_id == trace_id]
    assert spans, f"no exported span in the caller's trace; got {collector.spans}"
    assert {span.service for span in spans} == {"m3-under-test"}

    def one(name: str, **attributes: Any) -> ExportedSpan:
        found = [
            span
            for span in spans
            if span.name == name and all(span.attributes.get(k) == v for k, v in attributes.items())
        ]
        assert len(found) == 1, (name, [s.name for s in spans])
        return found[0]

    execution_id, round_id = handle.execution_id, pending.round_id
    submit = one("m3.v1.ExecutionService/Submit")
    assert submit.parent_span_id == parent_id  # the client's context crossed the wire
    assert submit.attributes["rpc.grpc.status_code"] == 0
    execution = one("m3.execution")
    assert execution.parent_span_id == submit.span_id  # stored with the execution
    assert execution.attributes["m3.execution_id"] == execution_id
    assert execution.attributes["m3.outcome"] == "succeeded"
    operation = one("m3.operation")
    assert operation.parent_span_id == execution.span_id
    assert operation.attributes["m3.operation.name"] == "book_shipment"
    assert operation.attributes["m3.outcome"] == "ok"
    mcp_call = one("MCP send tools/call book_shipment")  # the MCP SDK's own span
    assert mcp_call.parent_span_id == operation.span_id
    round_span = one("m3.round")
    assert round_span.parent_span_id == operation.span_id
    assert round_span.attributes["m3.round_id"] == round_id
    assert round_span.attributes["m3.round.status"] == "resolved"
    assert round_span.events == ["pending", "answered", "delivered"]
    respond = one("m3.v1.ElicitationService/Respond")
    assert respond.parent_span_id == parent_id
    answered = one("m3.round.respond")
    assert answered.parent_span_id == respond.span_id
    assert answered.attributes["m3.round_id"] == round_id
    assert answered.attributes["m3.execution_id"] == execution_id
    assert answered.attributes["m3.round.status"] == "response_validated"
    # The answer links to the trace the execution was submitted in.
    assert (trace_id, submit.span_id) in answered.links
    [missing] = [span for span in spans if span.attributes.get("rpc.grpc.status_code") == 5]
    assert missing.parent_span_id == parent_id and missing.name.startswith("m3.v1.")
    # Polling GetPending and waiting on GetResult are traced too.
    assert any(span.name == "m3.v1.ElicitationService/GetPending" for span in spans)
    # The answer's content is nowhere in what was exported.
    assert collector.bodies
    assert not any(CANARY.encode() in body for body in collector.bodies)


def test_tracing_without_the_extra_refuses_to_start(tmp_path: Path) -> None:
    config = _traced_config(tmp_path, "http://127.0.0.1:9/v1/traces")
    # The SDK made unimportable, as in an install without the `tracing` extra.
    program = (
        "import sys\n"
        "sys.modules['opentelemetry.sdk'] = None\n"
        "from m3grpc.cli import main\n"
        f"sys.exit(main(['serve', '--config', {str(config)!r}, '--listen', '127.0.0.1:0']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "tracing is enabled" in lines[0]
    assert "m3grpc[tracing]" in lines[0]
    assert not (tmp_path / "m3.sqlite").exists()  # refused before anything was touched


def test_tracing_off_loads_no_opentelemetry_of_ours(tmp_path: Path) -> None:
    # The service's modules, a config without [tracing]: neither our binding nor
    # the SDK is imported (the MCP SDK's own API import is not ours to avoid).
    program = (
        "import sys\n"
        "import m3grpc.api.server, m3grpc.cli\n"
        "from m3grpc.api.config import load_config\n"
        "from m3grpc.api.server import _start_tracing\n"
        "assert _start_tracing(load_config(None)) == ([], None)\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', "
        "'opentelemetry.exporter', 'm3grpc.api.otel')))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_client_sends_trace_context_only_when_the_caller_traces() -> None:
    # No OpenTelemetry loaded by the application: nothing imported, nothing sent.
    program = (
        "import sys\n"
        "from m3grpc.client import RemoteMCPTestKit\n"
        "from m3grpc.client.trace_context import trace_metadata\n"
        "assert trace_metadata() is None\n"
        "assert 'opentelemetry.propagate' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # Loaded, but outside any span: still nothing to send.
    assert trace_metadata() is None
    tracer = TracerProvider().get_tracer("the-caller")
    with tracer.start_as_current_span("caller") as span:
        metadata = dict(trace_metadata() or ())
    context = span.get_span_context()
    assert metadata["traceparent"] == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )


def test_tracing_config_defaults_and_environment() -> None:
    assert load_config(None).tracing == TracingSection()
    assert not TracingSection().enabled
    section = TracingSection(enabled=True)
    assert section.resolved_protocol({}) == "http/protobuf"
    assert section.resolved_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    assert (
        section.resolved_protocol(
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            }
        )
        == "http/protobuf"
    )
    assert TracingSection(protocol="grpc").resolved_protocol({}) == "grpc"
    assert section.resolved_service_name({}) == "m3grpc"
    assert section.resolved_service_name({"OTEL_SERVICE_NAME": "checkout"}) == "checkout"
    assert (
        TracingSection(service_name="mine").resolved_service_name({"OTEL_SERVICE_NAME": "x"})
        == "mine"
    )


def test_a_bad_tracing_section_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "m3.toml"
    config.write_text('[tracing]\nenabled = true\nprotocol = "thrift"\n')
    with pytest.raises(ConfigError, match=r"tracing\.protocol"):
        load_config(config)
    config.write_text("[tracing]\nenable = true\n")  # a misspelt key is refused too
    with pytest.raises(ConfigError, match=r"tracing\.enable"):
        load_config(config)


def test_check_config_tells_where_traces_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(_traced_config(tmp_path, "http://user:secret@127.0.0.1:4318/v1/traces"))
    [line] = [line for line in preflight(config, None).lines() if "tracing" in line]
    assert line.startswith("ok")
    assert "OTLP http/protobuf to http://user:***@127.0.0.1:4318/v1/traces" in line
    assert "secret" not in line and "service m3-under-test" in line
    assert not any("tracing" in line for line in preflight(load_config(None), None).lines())
    # Without the SDK installed, the same configuration is an error line.
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    [line] = [line for line in preflight(config, None).lines() if "tracing" in line]
    assert line.startswith("error") and "m3grpc[tracing]" in line


class _GrpcCollector(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """The OTLP/gRPC receiver: hands each request's bytes to a Collector."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def Export(self, request: ExportTraceServiceRequest, context: Any) -> Any:
        self.collector.receive("/v1/traces", request.SerializeToString())
        return ExportTraceServiceResponse()


def test_otlp_grpc_export(tmp_path: Path, collector: Collector) -> None:
    receiver = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_GrpcCollector(collector), receiver)
    port = receiver.add_insecure_port("127.0.0.1:0")
    receiver.start()
    try:
        config = _traced_config(tmp_path, f"http://127.0.0.1:{port}", protocol="grpc")
        server = ServeProcess(config, log=tmp_path / "server.log", env=_service_env()).start()
        tracer = TracerProvider().get_tracer("the-caller")
        try:
            with (
                RemoteMCPTestKit(server.address) as kit,
                tracer.start_as_current_span("discover") as parent,
            ):
                assert [s.name for s in kit.list_servers(["shipping"])] == ["shipping"]
        finally:
            assert server.stop() == 0
    finally:
        receiver.stop(None)
    context = parent.get_span_context()
    [listed] = [s for s in collector.spans if s.name == "m3.v1.ExecutionService/ListServers"]
    assert listed.trace_id == f"{context.trace_id:032x}"
    assert listed.parent_span_id == f"{context.span_id:016x}"
