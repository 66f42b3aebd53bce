"""The redaction canary: a real `m3grpc serve` with everything that writes output
turned on (JSON logs at DEBUG, Prometheus metrics, OpenTelemetry traces to a
loopback collector, the web inbox, encryption at rest) gets answers carrying a
unique canary string: a valid answer, answers of the wrong type, outside an
enum, a pattern, a format and a length, a conflicting replay, an answer to a
cancelled round, a malformed inbox answer. Then every read RPC runs and
everything the service wrote or sent is searched for the canary.

Where the canary may legitimately appear (the delivery path): the MCP server
receives the answer, and the tool's result (`OperationResult.result` in Result)
is what the tool returned, which here echoes the address. Everything else — logs
at every level, metrics, spans, GetRound / ListRounds / WatchPending / Snapshot,
error messages, ErrorInfo metadata, field violations, inbox JSON, the stored
round rows — must not contain it."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from m3grpc.devtools.serve_process import ROOT, ServeProcess
from m3grpc.types import ElicitationResponse
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.api.conftest import SERVERS, Stubs, add_servers, respond_request, write_config
from tests.api.inbox_support import InboxClient, submit
from tests.api.test_tracing import Collector, _service_env, collector  # noqa: F401

CANARY = "canary-0b7d5e3a91c4-answer"
ACCEPT = elicitation_pb2.ELICITATION_ACTION_ACCEPT
PENDING = elicitation_pb2.MANAGED_INPUT_STATUS_PENDING


class Seen:
    """Everything the service sent back, by where it came from."""

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes]] = []

    def add(self, where: str, data: bytes | str) -> None:
        self.items.append((where, data.encode() if isinstance(data, str) else data))

    def reply(self, where: str, message: Any) -> Any:
        self.add(where, message.SerializeToString())
        return message

    def error(self, where: str, call: Callable[[], Any]) -> error_details_pb2.BadRequest:
        """Run a call that must fail; keep its whole status (message, ErrorInfo
        metadata, field violations) and return its field violations."""
        with pytest.raises(grpc.RpcError) as caught:
            call()
        status = rpc_status.from_call(caught.value)
        assert status is not None, caught.value
        self.add(where, status.SerializeToString())
        self.add(where, str(caught.value.details()))
        violations = error_details_pb2.BadRequest()
        for detail in status.details:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                detail.Unpack(violations)
        return violations

    def leaks(self) -> list[str]:
        """Where the canary appears, each with the text around its first place."""
        found = []
        for where, data in self.items:
            at = data.find(CANARY.encode())
            if at >= 0:
                found.append(f"{where}: {data[max(0, at - 120) : at + 60]!r}")
        return found


def _respond(round_id: str, key: str, request_key: str, content: dict[str, Any]) -> Any:
    return respond_request(round_id, key, content, request_key=request_key)


def _fields(violations: error_details_pb2.BadRequest) -> list[str]:
    return [v.field for v in violations.field_violations]


def _config(tmp: Path, sink: Collector) -> Path:
    config = write_config(tmp / "m3.toml", tmp / "m3.sqlite")
    add_servers(
        config,
        {
            name: {
                "command": sys.executable,
                "args": [str(SERVERS / f"{name}.py")],
                "protocol": "legacy",
            }
            for name in ("order_form", "profile_form")
        },
    )
    with config.open("a") as file:
        file.write(
            "[tracing]\nenabled = true\n"
            f"endpoint = {json.dumps(sink.endpoint)}\n"
            'protocol = "http/protobuf"\n'
        )
    return config


def test_the_canary_is_nowhere_but_the_delivery_path(
    tmp_path: Path,
    collector: Collector,  # noqa: F811
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    server = ServeProcess(
        _config(tmp_path, collector),
        log=tmp_path / "server.log",
        args=(
            *("--log-level", "debug", "--log-format", "json"),
            *("--metrics-listen", "127.0.0.1:0", "--inbox-listen", "127.0.0.1:0"),
        ),
        env={**_service_env(), "M3_ENCRYPTION_KEYS": f"k1:{key}"},
    ).start()
    seen = Seen()
    stubs = Stubs(grpc.insecure_channel(server.address))
    inbox = InboxClient(server.inbox_url)
    executions: list[str] = []
    try:
        # A valid answer: delivered, the tool echoes it in its result.
        booked = submit(stubs, "shipping", "book_shipment")
        executions.append(booked)
        booked_round = stubs.wait_pending(booked).round_id
        address = {"street": CANARY, "city": "Pune"}
        seen.reply("Respond", stubs.respond(booked_round, "ok-1", address))
        # The same key with other content: a conflict that must not echo either.
        seen.error(
            "Respond conflict",
            lambda: stubs.respond(booked_round, "ok-1", {"street": CANARY + "-2", "city": "X"}),
        )

        # Wrong types, then a cancelled round answered after the cancel.
        shipping = submit(stubs, "shipping", "book_shipment")
        executions.append(shipping)
        shipping_round = stubs.wait_pending(shipping).round_id
        violations = seen.error(
            "Respond wrong type",
            lambda: stubs.respond(shipping_round, "t-1", {"street": [CANARY], "city": {"c": 1}}),
        )
        assert set(_fields(violations)) == {
            "responses['shipping_address'].content.street",
            "responses['shipping_address'].content.city",
        }
        seen.reply(
            "Cancel",
            stubs.executions.Cancel(
                execution_service_pb2.CancelRequest(execution_id=shipping), timeout=30
            ),
        )
        stubs.result(shipping)  # the cancel is done: the round failed with the execution
        seen.error(
            "Respond after cancel",
            lambda: stubs.respond(shipping_round, "t-2", {"street": CANARY, "city": "Pune"}),
        )

        # An enum, through gRPC and through the inbox (also a malformed inbox answer).
        order = submit(stubs, "order_form", "place_order")
        executions.append(order)
        order_round = stubs.wait_pending(order).round_id
        bad_order = {"item": "Widget", "weight_kg": 2.5, "color": CANARY}
        violations = seen.error(
            "Respond enum",
            lambda: stubs.elicitation.Respond(
                _respond(order_round, "o-1", "order", bad_order), timeout=30
            ),
        )
        assert _fields(violations) == ["responses['order'].content.color"]
        for body in (
            {"idempotency_key": "o-2", "responses": {"order": {"action": 1, "content": bad_order}}},
            {"idempotency_key": "o-3", "responses": {"order": {"action": CANARY}}},
            {"idempotency_key": "o-4", "responses": {"order": {"content": CANARY}}},
            {"idempotency_key": "o-5", "extra": CANARY},  # a name may be named, a value not
        ):
            status, reply = inbox.respond(order_round, body)
            assert status == 400, reply
            seen.add("inbox respond", json.dumps(reply))

        # A pattern, a format, a length, items outside an enum.
        profile = submit(stubs, "profile_form", "edit_profile")
        executions.append(profile)
        profile_round = stubs.wait_pending(profile).round_id
        bad_profile = {
            "email": CANARY,
            "handle": CANARY.upper(),
            "birthday": CANARY,
            "plan": CANARY,
            "topics": [CANARY],
            "bio": CANARY,
        }
        violations = seen.error(
            "Respond profile",
            lambda: stubs.elicitation.Respond(
                _respond(profile_round, "p-1", "profile", bad_profile), timeout=30
            ),
        )
        assert {f.rsplit(".", 1)[-1] for f in _fields(violations)} >= {
            "email",
            "handle",
            "birthday",
            "plan",
            "bio",
        }, _fields(violations)
        # The rounds left unanswered end with their executions.
        for execution_id in (order, profile):
            stubs.executions.Cancel(
                execution_service_pb2.CancelRequest(execution_id=execution_id), timeout=30
            )

        # Every read, for every execution and round.
        round_ids: list[str] = []
        for execution_id in executions:
            result = stubs.result(execution_id)
            if execution_id == booked:
                # The delivery path: the tool got the answer and echoed it.
                assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
                outputs = [op.result.SerializeToString() for op in result.operations]
                assert any(CANARY.encode() in output for output in outputs), outputs
            for operation in result.operations:
                operation.ClearField("result")
            seen.reply("Result", result)
            seen.reply(
                "Snapshot",
                stubs.executions.Snapshot(
                    execution_service_pb2.SnapshotRequest(execution_id=execution_id), timeout=30
                ),
            )
            for event in stubs.executions.WatchPending(
                execution_service_pb2.WatchPendingRequest(execution_id=execution_id), timeout=60
            ):
                seen.reply("WatchPending", event)
            listed = seen.reply(
                "ListRounds",
                stubs.elicitation.ListRounds(
                    elicitation_service_pb2.ListRoundsRequest(execution_id=execution_id),
                    timeout=30,
                ),
            )
            round_ids += [r.round_id for r in listed.rounds]
        assert set(round_ids) >= {booked_round, shipping_round, order_round, profile_round}
        seen.reply(
            "ListRounds all",
            stubs.elicitation.ListRounds(elicitation_service_pb2.ListRoundsRequest(), timeout=30),
        )
        for round_id in round_ids:
            got = seen.reply(
                "GetRound",
                stubs.elicitation.GetRound(
                    elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
                ),
            )
            assert got.round.status != PENDING
            status, reply = inbox.get(f"/api/rounds/{round_id}")
            assert status == 200, reply
            seen.add("inbox round", json.dumps(reply))
        # The answered round's redacted view still says what was answered.
        status, reply = inbox.get(f"/api/rounds/{booked_round}")
        assert reply["round"]["responses"]["idempotency_key"] == "ok-1", reply
        status, reply = inbox.get("/api/rounds")
        seen.add("inbox rounds", json.dumps(reply))
        with urllib.request.urlopen(server.metrics_url, timeout=30) as scrape:
            metrics = scrape.read()
        assert b"m3_" in metrics
        seen.add("metrics", metrics)
    finally:
        stubs.close()
        # SIGTERM: the service flushes its last spans before it exits.
        assert server.stop() == 0

    seen.add("stdout", "\n".join(server.output))
    log = (tmp_path / "server.log").read_text()
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(r.get("level") == "debug" for r in records), log[-2000:]
    seen.add("log", log)
    assert collector.bodies, "no spans exported"
    for body in collector.bodies:
        seen.add("spans", body)
    # At rest: the rounds' stored responses are sealed (the tool's result is not ours).
    with sqlite3.connect(tmp_path / "m3.sqlite") as db:
        stored = [
            str(row[0])
            for row in db.execute("SELECT responses FROM m3_managed_input_rounds")
            if row[0] is not None
        ]
    assert stored and all("_m3_sealed" in value for value in stored), stored
    seen.add("stored responses", "\n".join(stored))
    leaks = seen.leaks()
    assert not leaks, "\n".join(leaks)


def test_serve_refuses_stored_answers_it_cannot_decrypt(tmp_path: Path) -> None:
    from m3grpc.storage import SqlExecutionStore
    from m3grpc.storage.encryption import parse_keys
    from tests.storage.conftest import ManualClock, make_lease, make_round, new_execution

    database = tmp_path / "m3.sqlite"
    key = base64.b64encode(os.urandom(32)).decode()
    clock = ManualClock()
    store = SqlExecutionStore(database, clock=clock, cipher=parse_keys(f"k1:{key}", source="t"))
    pending = make_round(new_execution(store), clock)
    store.managed_input_store.create_round(pending, lease=make_lease(clock))
    store.managed_input_store.submit_responses(
        pending.round_id,
        {
            "shipping_address": ElicitationResponse(
                action="accept", content={"street": CANARY, "city": "Pune"}
            )
        },
        idempotency_key="k",
    )
    store.close()
    config = tmp_path / "m3.toml"
    # Any free port: the default one may be another program's (a user's own service).
    config.write_text(f'database = {json.dumps(str(database))}\nlisten = "127.0.0.1:0"\n')
    env = {k: v for k, v in os.environ.items() if k != "M3_ENCRYPTION_KEYS"}
    other = base64.b64encode(os.urandom(32)).decode()
    for keys, expected in (
        (None, "encrypted with key 'k1', which is not configured"),
        (f"k2:{other}", "encrypted with key 'k1', which is not configured"),
        (f"k2:{other[:-8]}", "key 'k2' must be 32 bytes"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "m3grpc", "serve", "--config", str(config)],
            cwd=ROOT,
            env=env if keys is None else {**env, "M3_ENCRYPTION_KEYS": keys},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("m3grpc: ") and expected in line, line
        assert other[:-8] not in line and key not in line
