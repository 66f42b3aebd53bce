"""The web inbox's JSON endpoints and event stream, over HTTP against a real
`m3grpc serve` (tests/api/inbox_support.py); the page itself is driven in a
browser by test_inbox_browser.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from m3grpc.api.inbox.server import allowed_hosts
from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.wire.gen.m3.v1 import execution_pb2
from tests.api.conftest import ROOT, Stubs
from tests.api.inbox_support import (
    PENDING,
    InboxClient,
    InboxService,
    inbox_service,
    round_status,
    stubs,
    submit,
    wait_listed,
)

__all__ = ["inbox_service", "stubs"]  # fixtures

ACCEPT = "ELICITATION_ACTION_ACCEPT"
ORDER = {"item": "Widget", "quantity": 3, "weight_kg": 2.5, "express": True, "color": "blue"}


def test_answer_with_field_errors_then_valid_then_replay(
    inbox_service: InboxService, stubs: Stubs
) -> None:
    client = InboxClient(inbox_service.inbox_url)
    execution_id = submit(stubs, "order_form", "place_order")
    listed = wait_listed(client, execution_id)
    round_id = listed["round_id"]
    schema = listed["requests"]["order"]["form"]["requested_schema"]
    assert schema["properties"]["quantity"]["minimum"] == 1
    assert listed["status"] == "MANAGED_INPUT_STATUS_PENDING"

    # Invalid content: the same violations as gRPC Respond, as request paths; nothing changes.
    bad = {"responses": {"order": {"action": ACCEPT, "content": ORDER | {"quantity": 0}}}}
    code, body = client.respond(round_id, bad | {"idempotency_key": "http-1"})
    assert code == 400
    assert body["error"]["reason"] == "MANAGED_INPUT_INVALID"
    assert body["error"]["field_violations"] == [
        {
            "field": "responses['order'].content.quantity",
            "description": "is less than the minimum of 1",
        }
    ]
    assert round_status(stubs, round_id) == PENDING

    good = {
        "idempotency_key": "http-1",
        "responses": {"order": {"action": ACCEPT, "content": ORDER}},
    }
    code, body = client.respond(round_id, good)
    assert (code, body["replayed"]) == (200, False), body
    assert body["status"] == "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"
    # A retry with the same key replays; other content under it is a conflict.
    code, body = client.respond(round_id, good)
    assert (code, body["replayed"]) == (200, True)
    other = {**good, "responses": {"order": {"action": ACCEPT, "content": ORDER | {"quantity": 4}}}}
    code, body = client.respond(round_id, other)
    assert code == 409 and body["error"]["reason"] == "MANAGED_INPUT_CONFLICT"

    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    assert (
        "ordered 3 x Widget (2.5 kg, express, blue"
        in result.operations[0].result["content"][0]["text"]
    )

    # The round's history: statuses and times, the answer redacted to actions and keys.
    code, body = client.get(f"/api/rounds/{round_id}")
    assert code == 200
    history = body["round"]
    assert history["responses"]["idempotency_key"] == "http-1"
    assert history["responses"]["responses"]["order"]["content_keys"] == sorted(ORDER)
    assert "Widget" not in json.dumps(history)
    assert {"create_time", "response_validate_time"} <= history.keys()
    listed_now = client.get("/api/rounds")[1]["rounds"]
    assert round_id not in {r["round_id"] for r in listed_now}
    # What became of the execution (the page follows an answered round to it).
    code, body = client.get(f"/api/executions/{execution_id}")
    assert code == 200, body
    execution = body["execution"]
    assert execution["execution_id"] == execution_id
    assert execution["lifecycle"] == "EXECUTION_STATUS_FINISHED"
    assert execution["outcome"] == "EXECUTION_OUTCOME_SUCCEEDED"
    code, body = client.get("/api/executions/exe_missing")
    assert code == 404 and body["error"]["reason"] == "EXECUTION_NOT_FOUND"


def test_malformed_requests_are_typed_errors(inbox_service: InboxService, stubs: Stubs) -> None:
    client = InboxClient(inbox_service.inbox_url)
    execution_id = submit(stubs, "shipping", "book_shipment")
    round_id = wait_listed(client, execution_id)["round_id"]
    for document, field in (
        (b"not json", None),
        ([1, 2], None),
        ({"idempotency_key": 7, "responses": {}}, "idempotency_key"),
        (
            {"idempotency_key": "k", "responses": {"shipping_address": {"action": "NOPE"}}},
            "responses",
        ),
        ({"idempotency_key": "k", "responses": {}, "extra": 1}, "extra"),
        # JSON spells what gRPC cannot carry: refused as gRPC refuses it, never a 500
        # and never an answer stored with a NUL (which PostgreSQL cannot keep).
        # Past the JSON decoder's depth, and a number no Struct (a double) holds.
        (b"[" * 100_000, None),
        (
            {
                "idempotency_key": "k",
                "responses": {
                    "shipping_address": {
                        "action": "ELICITATION_ACTION_ACCEPT",
                        "content": {"street": 10**400, "city": "Pune"},
                    }
                },
            },
            "responses",
        ),
        ({"idempotency_key": "k\ud800", "responses": {}}, "idempotency_key"),
        ({"idempotency_key": "k\x00", "responses": {}}, "idempotency_key"),
        (
            {
                "idempotency_key": "k",
                "responses": {
                    "shipping_address": {
                        "action": "ELICITATION_ACTION_ACCEPT",
                        "content": {"street": "1 Main\x00Street", "city": "Pune"},
                    }
                },
            },
            "responses['shipping_address'].content.street",
        ),
    ):
        code, body = client.respond(round_id, document)
        assert code == 400, body
        assert body["error"]["reason"] == "MANAGED_INPUT_INVALID"
        fields = [v["field"] for v in body["error"]["field_violations"]]
        assert fields == ([field] if field else [])
    # The missing request key is named like gRPC names it.
    code, body = client.respond(round_id, {"idempotency_key": "k", "responses": {}})
    assert code == 400
    assert body["error"]["field_violations"][0]["field"] == "responses['shipping_address']"
    assert round_status(stubs, round_id) == PENDING
    assert client.get("/api/rounds/rnd_missing")[0] == 404
    code, body = client.respond("rnd_missing", {"idempotency_key": "k", "responses": {}})
    assert code == 404 and body["error"]["reason"] == "ROUND_NOT_FOUND"
    # A malformed round ID is refused as gRPC refuses it (docs/reference/identifiers.md).
    for malformed in ("%20", "%09%20", "r" * 5000):
        code, body = client.get(f"/api/rounds/{malformed}")
        assert code == 400 and body["error"]["reason"] == "MANAGED_INPUT_INVALID", body
        assert [v["field"] for v in body["error"]["field_violations"]] == ["round_id"]
        assert all(len(value) <= 80 for value in body["error"]["metadata"].values())
    # Decline answers it: the tool sees the decline.
    code, body = client.respond(
        round_id,
        {
            "idempotency_key": "d",
            "responses": {"shipping_address": {"action": "ELICITATION_ACTION_DECLINE"}},
        },
    )
    assert code == 200, body
    result = stubs.result(execution_id)
    assert result.operations[0].result["content"][0]["text"] == "shipment not booked: declined"


def test_event_stream_sends_pending_rounds_and_resumes(
    inbox_service: InboxService, stubs: Stubs
) -> None:
    client = InboxClient(inbox_service.inbox_url)
    execution_id = submit(stubs, "shipping", "book_shipment")
    round_id = wait_listed(client, execution_id)["round_id"]
    with urllib.request.urlopen(inbox_service.inbox_url + "api/events", timeout=30) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        event = _next_event(stream, "round_pending", round_id)
    assert event["data"]["round_pending"]["requests"]["shipping_address"]["form"]["message"]
    client.respond(
        round_id,
        {
            "idempotency_key": "e",
            "responses": {"shipping_address": {"action": "ELICITATION_ACTION_CANCEL"}},
        },
    )
    # Resuming after that event (a browser's Last-Event-ID) sends what came next.
    request = urllib.request.Request(
        inbox_service.inbox_url + "api/events", headers={"Last-Event-ID": event["id"]}
    )
    with urllib.request.urlopen(request, timeout=30) as stream:
        left = _next_event(stream, "round_left_pending", round_id)
    assert left["data"]["round_left_pending"]["status"] == "MANAGED_INPUT_STATUS_RESPONSE_VALIDATED"


def _next_event(stream: object, kind: str, round_id: str) -> dict[str, object]:
    fields: dict[str, str] = {}
    for raw in stream:  # type: ignore[attr-defined]
        line = raw.decode().rstrip("\n")
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if fields.get("event") == kind:
            data = json.loads(fields["data"])
            if data[kind]["round_id"] == round_id:
                return {"id": fields["id"], "data": data}
        fields = {}
    raise AssertionError(f"the stream ended before {kind} of {round_id}")


def test_inbox_is_off_by_default_and_a_busy_port_refuses_the_start(tmp_path: Path) -> None:
    from tests.api.inbox_support import write_inbox_config

    config = write_inbox_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    plain = ServeProcess(config, log=tmp_path / "plain.log").start()
    try:
        assert plain.inbox_url == ""
        assert not any("inbox" in line for line in plain.output)
    finally:
        plain.stop()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "m3grpc.cli",
                "serve",
                "--config",
                str(config),
                "--listen",
                "127.0.0.1:0",
                "--inbox-listen",
                f"127.0.0.1:{port}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 2
    assert run.stderr.startswith(f"m3grpc: cannot listen on 127.0.0.1:{port}")


def test_sigterm_ends_open_event_streams_and_the_service_exits(tmp_path: Path) -> None:
    from tests.api.inbox_support import write_inbox_config

    config = write_inbox_config(tmp_path / "m3.toml", tmp_path / "m3.sqlite")
    service = InboxService(config, tmp_path / "server.log").start()
    try:
        stream = urllib.request.urlopen(service.inbox_url + "api/events", timeout=60)
        assert stream.readline() == b"retry: 1000\n"
        assert service.terminate(timeout=60) == 0
        # The stream ended (the browser reconnects and resumes by Last-Event-ID).
        assert stream.read() in (b"", b"\n")
        stream.close()
    finally:
        service.stop()


def test_other_sites_cannot_post_answers_or_rebind_the_host(
    inbox_service: InboxService, stubs: Stubs
) -> None:
    client = InboxClient(inbox_service.inbox_url)
    execution_id = submit(stubs, "shipping", "book_shipment")
    round_id = wait_listed(client, execution_id)["round_id"]
    answer = {
        "idempotency_key": "csrf",
        "responses": {"shipping_address": {"action": "ELICITATION_ACTION_DECLINE"}},
    }
    # What a plain HTML form of another site can send (no CORS preflight): refused.
    request = urllib.request.Request(
        f"{inbox_service.inbox_url}api/rounds/{round_id}/respond",
        data=json.dumps(answer).encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["error"]["reason"] == "MANAGED_INPUT_INVALID"
    # A DNS name rebound to the loopback inbox is not served.
    port = inbox_service.inbox_url.rstrip("/").rpartition(":")[2]
    rebound = urllib.request.Request(
        inbox_service.inbox_url + "api/rounds", headers={"Host": f"evil.example:{port}"}
    )
    with pytest.raises(urllib.error.HTTPError) as wrong_host:
        urllib.request.urlopen(rebound, timeout=30)
    assert wrong_host.value.code == 400
    assert round_status(stubs, round_id) == PENDING
    assert client.respond(round_id, answer)[0] == 200


@pytest.mark.parametrize(
    ("address", "served"),
    [
        ("127.0.0.1:0", True),
        ("127.0.0.5:0", True),
        ("localhost:0", True),
        ("[::1]:0", True),  # IPv6 loopback: as loopback as 127.0.0.1
        ("0.0.0.0:0", False),
        ("[::]:0", False),
        ("inbox.example:0", False),
    ],
)
def test_a_loopback_inbox_serves_only_its_own_host_names(address: str, served: bool) -> None:
    # A loopback inbox may run without tokens (the service's exposure check), so a DNS
    # name rebound to it must not be served, on IPv6 loopback as on IPv4.
    hosts = allowed_hosts(address)
    assert ("*" not in hosts) is served
    if served:
        assert "evil.example" not in hosts
        assert {"localhost", "127.0.0.1", "[::1]"} <= set(hosts)
