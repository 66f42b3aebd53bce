"""What an operator sees of a real `m3grpc serve`: JSON logs (one line per event,
lifecycle with IDs, RPCs with codes, never response content), Prometheus
metrics scraped over loopback, and reflection v1 as well as v1alpha."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from prometheus_client.parser import text_string_to_metric_families

from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.wire.gen.m3.v1 import elicitation_service_pb2, execution_pb2, execution_service_pb2
from tests.api.conftest import Stubs, expect_failure, write_config

# A value only the answer carries: it must appear in no log line at any level.
CANARY = "canary-7f3e9b1d-street"


@pytest.fixture(scope="module")
def debug_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    tmp = tmp_path_factory.mktemp("observe")
    config = write_config(tmp / "m3.toml", tmp / "m3.sqlite")
    server = ServeProcess(
        config,
        log=tmp / "server.log",
        args=(
            "--log-level",
            "debug",
            "--log-format",
            "json",
            "--metrics-listen",
            "127.0.0.1:0",
        ),
    ).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def answered(debug_server: ServeProcess) -> dict[str, str]:
    """One managed execution whose round is answered with the canary, finished."""
    stubs = Stubs(grpc.insecure_channel(debug_server.address))
    try:
        execution_id = stubs.submit_managed()
        pending = stubs.wait_pending(execution_id)
        stubs.respond(pending.round_id, "canary-key", {"street": CANARY, "city": "Pune"})
        result = stubs.result(execution_id)
        assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
        # The answer did reach the server: the canary is in the tool's result.
        assert CANARY in str(result.operations[0].result)
        # A call that fails, so an error code is counted too.
        expect_failure(
            stubs.elicitation.GetRound,
            elicitation_service_pb2.GetRoundRequest(round_id="rnd_missing"),
            timeout=10,
        )
        return {"execution_id": execution_id, "round_id": pending.round_id}
    finally:
        stubs.close()


def _scrape(server: ServeProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert server.metrics_url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _scrape_once_counted(
    server: ServeProcess, method: str, code: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A scrape in which `method` has been counted with `code`. An aborted call's
    status reaches the client before the server's interceptor counts it (grpc.aio
    sends the status inside `abort`), so the count may lag the client by moments."""
    deadline = time.monotonic() + 10
    while True:
        samples = _scrape(server)
        if _value(samples, "m3_rpcs_total", method=method, code=code) or (
            time.monotonic() > deadline
        ):
            return samples
        time.sleep(0.05)


def test_metrics_move_with_a_real_round(
    debug_server: ServeProcess, answered: dict[str, str]
) -> None:
    get_round = "/m3.v1.ElicitationService/GetRound"
    samples = _scrape_once_counted(debug_server, get_round, "NOT_FOUND")
    respond = "/m3.v1.ElicitationService/Respond"
    assert _value(samples, "m3_rpcs_total", method=respond, code="OK") >= 1
    assert _value(samples, "m3_rpcs_total", method=get_round, code="NOT_FOUND") == 1
    assert _value(samples, "m3_rpc_duration_seconds_count", method=respond) >= 1
    assert _value(samples, "m3_executions_submitted_total") == 1
    assert (
        _value(samples, "m3_executions_finished_total", outcome="succeeded", failure_code="") == 1
    )
    for status in ("pending", "response_validated", "delivered", "resolved"):
        assert _value(samples, "m3_round_transitions_total", status=status) == 1, status
    assert _value(samples, "m3_round_response_seconds_count") == 1
    assert _value(samples, "m3_deliveries_total") == 1
    assert _value(samples, "m3_rounds", status="resolved") == 1
    assert _value(samples, "m3_rounds", status="pending") == 0
    assert ("m3_pending_rounds", ()) in samples
    assert _value(samples, "m3_pending_rounds") == 0
    assert _value(samples, "m3_queue_depth") == 0
    assert _value(samples, "m3_active_executions") == 0
    assert _value(samples, "m3_workers_up") == 1
    assert not any(name.endswith("_created") for name, _ in samples)
    # No ID and no content in any label.
    labels = " ".join(str(key[1]) for key in samples)
    assert answered["execution_id"] not in labels
    assert answered["round_id"] not in labels
    assert CANARY not in labels


def test_watchers_gauge_counts_open_streams(
    debug_server: ServeProcess, answered: dict[str, str]
) -> None:
    channel = grpc.insecure_channel(debug_server.address)
    stubs = Stubs(channel)
    try:
        execution_id = stubs.submit_managed()
        stream = stubs.executions.WatchPending(
            execution_service_pb2.WatchPendingRequest(execution_id=execution_id), timeout=60
        )
        first = next(stream)  # the stream is open and has sent the pending round
        assert first.HasField("round_pending")
        samples = _scrape(debug_server)
        assert _value(samples, "m3_watchers") == 1
        assert _value(samples, "m3_pending_rounds") == 1
        stream.cancel()
        stubs.executions.Cancel(
            execution_service_pb2.CancelRequest(execution_id=execution_id), timeout=30
        )
        stubs.result(execution_id)
    finally:
        stubs.close()


def _service_output(server: ServeProcess) -> str:
    assert server.log is not None
    return server.log.read_text() + "".join(server.output)


def test_json_logs_one_event_a_line_and_never_the_answer(
    debug_server: ServeProcess, answered: dict[str, str]
) -> None:
    execution_id, round_id = answered["execution_id"], answered["round_id"]
    # A later scrape and shutdown may log too: stop first, then read everything.
    debug_server.stop()
    output = _service_output(debug_server)
    assert CANARY not in output
    assert debug_server.log is not None
    lines = debug_server.log.read_text().splitlines()
    entries = [json.loads(line) for line in lines]  # every stderr line is one JSON object
    assert all({"ts", "level", "logger", "msg"} <= entry.keys() for entry in entries)
    assert any(entry["level"] == "debug" for entry in entries)  # debug really was on
    # grpc's and asyncio's own Python log lines went through the same formatter.
    loggers = {entry["logger"] for entry in entries}
    assert "asyncio" in loggers
    assert any(name.startswith("grpc") for name in loggers)

    mine = [e for e in entries if e.get("execution_id") == execution_id]
    events = [e["event"] for e in mine if "event" in e]
    for expected in (
        "execution.submitted",
        "execution.claimed",
        "round.pending",
        "round.response_accepted",
        "round.delivered",
        "round.resolved",
        "execution.finished",
    ):
        assert expected in events, (expected, events)
    assert events.index("round.pending") < events.index("round.response_accepted")
    assert events.index("round.resolved") < events.index("execution.finished")
    pending = next(e for e in mine if e.get("event") == "round.pending")
    assert pending["round_id"] == round_id
    finished = next(e for e in mine if e.get("event") == "execution.finished")
    assert finished["outcome"] == "succeeded"
    assert finished["level"] == "info"

    rpcs = [e for e in entries if e.get("event") == "rpc"]
    respond = [e for e in rpcs if e["method"] == "/m3.v1.ElicitationService/Respond"]
    assert respond and respond[0]["code"] == "OK"
    assert isinstance(respond[0]["duration_ms"], float)
    assert any(
        e["method"] == "/m3.v1.ElicitationService/GetRound" and e["code"] == "NOT_FOUND"
        for e in rpcs
    )


def test_text_format_is_the_default(tmp_path: Path) -> None:
    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    server = ServeProcess(config, log=tmp_path / "server.log", args=("--log-level", "info"))
    server.start()
    try:
        stubs = Stubs(grpc.insecure_channel(server.address))
        expect_failure(
            stubs.executions.Snapshot,
            execution_service_pb2.SnapshotRequest(execution_id="exe_missing"),
            timeout=10,
        )
        stubs.close()
    finally:
        server.stop()
    text = (tmp_path / "server.log").read_text()
    line = next(line for line in text.splitlines() if "/m3.v1.ExecutionService/Snapshot" in line)
    assert not line.startswith("{")
    assert " INFO m3grpc.rpc: " in line
    assert "code=NOT_FOUND" in line


# -- reflection v1 -------------------------------------------------------------------------


def _v1_reflection_classes() -> tuple[Any, Any]:
    """A grpc.reflection.v1 client's request and response classes, built from the
    published v1 proto (v1alpha's messages under the v1 package)."""
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    file.name = "test/grpc/reflection/v1/reflection.proto"
    file.package = "grpc.reflection.v1"
    for message in file.message_type:
        for field in message.field:
            if field.type_name:
                field.type_name = field.type_name.replace(".v1alpha.", ".v1.")
    for service in file.service:
        for method in service.method:
            method.input_type = method.input_type.replace(".v1alpha.", ".v1.")
            method.output_type = method.output_type.replace(".v1alpha.", ".v1.")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    request = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionRequest")
    )
    response = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionResponse")
    )
    return request, response


def test_reflection_v1_lists_the_services(stubs: Stubs) -> None:
    request_cls, response_cls = _v1_reflection_classes()
    call = stubs.channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    symbol = request_cls(file_containing_symbol="m3.v1.ExecutionService")
    replies = list(call(iter([request_cls(list_services=""), symbol]), timeout=10))
    names = {service.name for service in replies[0].list_services_response.service}
    assert {
        "m3.v1.ExecutionService",
        "m3.v1.ElicitationService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names
    files = replies[1].file_descriptor_response.file_descriptor_proto
    assert files  # the service's file and its dependencies, serialized
    from google.protobuf import descriptor_pb2

    parsed = [descriptor_pb2.FileDescriptorProto.FromString(data) for data in files]
    assert any(service.name == "ExecutionService" for file in parsed for service in file.service)
    # The v1 service describes itself, too.
    reflected = list(
        call(
            iter([request_cls(file_containing_symbol="grpc.reflection.v1.ServerReflection")]),
            timeout=10,
        )
    )
    own = descriptor_pb2.FileDescriptorProto.FromString(
        reflected[0].file_descriptor_response.file_descriptor_proto[0]
    )
    assert own.package == "grpc.reflection.v1"


def test_busy_metrics_port_is_refused(tmp_path: Path) -> None:
    """A metrics address another process holds refuses the start like a busy gRPC port."""
    from tests.api.test_startup import refused

    config = write_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = f"127.0.0.1:{holder.getsockname()[1]}"
        line = refused("--config", str(config), "--listen", "127.0.0.1:0", "--metrics-listen", busy)
    assert busy in line and "already in use" in line, line
    assert not (tmp_path / "m3.sqlite").exists()  # refused before touching anything
    line = refused("--config", str(config), "--metrics-listen", "127.0.0.1:99999")
    assert "out of range" in line, line
