"""The web inbox with the service's bearer tokens, over HTTP against a real
`m3grpc serve` (alice and bob are users, root an admin, carol's Respond bucket
is small): every API request needs `Authorization: Bearer <token>`; a caller
lists, reads, watches and answers only its own principal's rounds, another's
round is NOT_FOUND exactly like a missing one; an inbox answer shares the
caller's Respond rate limit with gRPC.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from m3grpc.api.auth import token_hash
from m3grpc.api.config import Auth, ServiceConfig, Token
from m3grpc.api.server import InsecureListenError, _check_exposure
from m3grpc.wire.gen.m3.v1 import (
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.api.conftest import Stubs, expect_failure
from tests.api.inbox_support import PENDING, InboxService, write_inbox_config

TOKENS = {
    "alice": "alice-inbox-token-31",
    "bob": "bob-inbox-token-52",
    "root": "root-inbox-token-77",
    "carol": "carol-inbox-token-90",
}
ROLES = {"root": "admin"}
UNKNOWN_ROUND = "rnd_00000000000000000000000000000000"
CANCEL = {"shipping_address": {"action": "ELICITATION_ACTION_CANCEL"}}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InboxService]:
    tmp = tmp_path_factory.mktemp("inbox-auth")
    config = write_inbox_config(tmp / "m3.toml", tmp / "m3.sqlite")
    extra = "[rate_limits]\nrespond_per_second = 0.5\nrespond_burst = 2\n"
    for who, token in TOKENS.items():
        role = ROLES.get(who, "user")
        extra += f'[[auth.tokens]]\nprincipal = "{who}"\nrole = "{role}"\n'
        extra += f'hash = "{token_hash(token)}"\n'
    config.write_text(config.read_text() + extra)
    server = InboxService(config, tmp / "server.log").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stubs(service: InboxService) -> Iterator[Stubs]:
    client = service.stubs()
    yield client
    client.close()


def _metadata(who: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[who]}"),)


def _call(
    service: InboxService,
    method: str,
    path: str,
    who: str | None,
    body: Any = None,
    *,
    token: str | None = None,
) -> tuple[int, Any, Any]:
    """(HTTP status, JSON body, headers) of an inbox request as `who` (None: no token)."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if who is not None or token is not None:
        headers["Authorization"] = f"Bearer {token or TOKENS[who or '']}"
    request = urllib.request.Request(
        service.inbox_url.rstrip("/") + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read()), reply.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


def _submit(stubs: Stubs, who: str) -> str:
    spec = execution_pb2.AgentSpec(
        harness="scripted",
        server="shipping",
        tools=["shipping:book_shipment"],
        prompt="Ask for the address.",
    )
    reply = stubs.executions.Submit(
        execution_service_pb2.SubmitRequest(
            agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
        ),
        timeout=30,
        metadata=_metadata(who),
    )
    return str(reply.execution_id)


def _pending_round(stubs: Stubs, who: str, execution_id: str) -> str:
    for _ in range(600):
        reply = stubs.elicitation.GetPending(
            elicitation_service_pb2.GetPendingRequest(execution_id=execution_id),
            timeout=30,
            metadata=_metadata(who),
        )
        if reply.HasField("round"):
            return str(reply.round.round_id)
        time.sleep(0.05)
    raise AssertionError(f"no pending round for {execution_id}")


def _status(stubs: Stubs, round_id: str) -> int:
    reply = stubs.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=round_id),
        timeout=30,
        metadata=_metadata("root"),
    )
    return int(reply.round.status)


def _listed(service: InboxService, who: str) -> set[str]:
    status, body, _ = _call(service, "GET", "/api/rounds", who)
    assert status == 200, body
    return {r["round_id"] for r in body["rounds"]}


def _streamed_until(service: InboxService, who: str, last: str) -> list[str]:
    """The round_pending round IDs of `who`'s event stream, up to `last`."""
    request = urllib.request.Request(
        service.inbox_url + "api/events", headers={"Authorization": f"Bearer {TOKENS[who]}"}
    )
    seen: list[str] = []
    with urllib.request.urlopen(request, timeout=30) as stream:
        fields: dict[str, str] = {}
        for raw in stream:
            line = raw.decode().rstrip("\n")
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields.get("event") == "round_pending":
                seen.append(json.loads(fields["data"])["round_pending"]["round_id"])
                if seen[-1] == last:
                    return seen
            fields = {}
    raise AssertionError(f"the stream ended before {last}")


def test_the_api_needs_a_token_and_the_page_does_not(service: InboxService, stubs: Stubs) -> None:
    with urllib.request.urlopen(service.inbox_url, timeout=30) as page:
        assert page.status == 200  # the page holds no data
    execution_id = _submit(stubs, "alice")
    round_id = _pending_round(stubs, "alice", execution_id)
    requests = [
        ("GET", "/api/rounds", None),
        ("GET", f"/api/rounds/{round_id}", None),
        ("POST", f"/api/rounds/{round_id}/respond", {"idempotency_key": "k", "responses": CANCEL}),
        ("GET", "/api/events", None),
        ("GET", f"/api/executions/{execution_id}", None),
    ]
    for method, path, body in requests:
        for token, credentials in ((None, "missing"), ("not-a-token", "invalid")):
            status, reply, headers = _call(service, method, path, None, body, token=token)
            assert status == 401, (path, reply)
            assert headers["WWW-Authenticate"] == "Bearer"
            assert reply["error"]["reason"] == "UNAUTHENTICATED"
            assert reply["error"]["metadata"] == {"credentials": credentials}
            assert "not-a-token" not in json.dumps(reply)
    assert _status(stubs, round_id) == PENDING
    status, reply, _ = _call(
        service,
        "POST",
        f"/api/rounds/{round_id}/respond",
        "alice",
        {"idempotency_key": "k", "responses": CANCEL},
    )
    assert status == 200, reply


def test_a_principal_sees_and_answers_only_its_own_rounds(
    service: InboxService, stubs: Stubs
) -> None:
    alices = _submit(stubs, "alice")
    alice_round = _pending_round(stubs, "alice", alices)
    bobs = _submit(stubs, "bob")
    bob_round = _pending_round(stubs, "bob", bobs)

    assert alice_round in _listed(service, "alice") and bob_round not in _listed(service, "alice")
    assert bob_round in _listed(service, "bob") and alice_round not in _listed(service, "bob")
    assert {alice_round, bob_round} <= _listed(service, "root")

    # Alice's round is to Bob what a missing round is: NOT_FOUND, naming only the ID asked.
    answer = {"idempotency_key": "bob-try", "responses": CANCEL}
    for round_id in (alice_round, UNKNOWN_ROUND):
        for method, path, body in (
            ("GET", f"/api/rounds/{round_id}", None),
            ("POST", f"/api/rounds/{round_id}/respond", answer),
        ):
            status, reply, _ = _call(service, method, path, "bob", body)
            assert status == 404, reply
            assert reply["error"]["reason"] == "ROUND_NOT_FOUND"
            assert reply["error"]["metadata"] == {"round_id": round_id}
    assert _status(stubs, alice_round) == PENDING
    # Her execution too: EXECUTION_NOT_FOUND, as for one that does not exist.
    status, reply, _ = _call(service, "GET", f"/api/executions/{alices}", "bob", None)
    assert status == 404 and reply["error"]["reason"] == "EXECUTION_NOT_FOUND", reply
    assert reply["error"]["metadata"] == {"execution_id": alices}
    assert _call(service, "GET", f"/api/executions/{alices}", "alice", None)[0] == 200

    # The live list: the snapshot is in creation order, so Alice's older round would
    # come before Bob's own if he could see it.
    assert alice_round not in _streamed_until(service, "bob", bob_round)
    assert alice_round in _streamed_until(service, "root", bob_round)

    assert _call(service, "GET", f"/api/rounds/{alice_round}", "alice")[0] == 200
    for who, round_id in (("alice", alice_round), ("root", bob_round)):  # an admin answers any
        status, reply, _ = _call(
            service,
            "POST",
            f"/api/rounds/{round_id}/respond",
            who,
            {"idempotency_key": f"{who}-answer", "responses": CANCEL},
        )
        assert status == 200, reply


def test_an_inbox_answer_shares_the_callers_respond_rate_limit(
    service: InboxService, stubs: Stubs
) -> None:
    execution_id = _submit(stubs, "carol")
    round_id = _pending_round(stubs, "carol", execution_id)
    for index in range(2):  # gRPC Respond calls empty carol's bucket (burst 2)
        failure = expect_failure(
            stubs.elicitation.Respond,
            elicitation_service_pb2.RespondRequest(
                round_id=UNKNOWN_ROUND, idempotency_key=f"probe-{index}"
            ),
            timeout=30,
            metadata=_metadata("carol"),
        )
        assert failure.code == grpc.StatusCode.NOT_FOUND
    answer = {"idempotency_key": "carol-answer", "responses": CANCEL}
    status, reply, headers = _call(
        service, "POST", f"/api/rounds/{round_id}/respond", "carol", answer
    )
    assert status == 429, reply
    assert reply["error"]["reason"] == "RATE_LIMITED"
    assert reply["error"]["metadata"]["method"] == "Respond"
    assert 1 <= int(headers["Retry-After"]) <= 2  # at 0.5 per second: at most 2 s
    assert _status(stubs, round_id) == PENDING


def test_an_inbox_beyond_loopback_needs_tokens_or_allow_insecure() -> None:
    beyond = "0.0.0.0:8080"
    with pytest.raises(InsecureListenError, match="web inbox"):
        _check_exposure(ServiceConfig(), "127.0.0.1:2", beyond)
    token = Token(principal="alice", hash=token_hash("t"))
    _check_exposure(ServiceConfig(auth=Auth(tokens=(token,))), "127.0.0.1:2", beyond)
    _check_exposure(ServiceConfig(allow_insecure=True), "127.0.0.1:2", beyond)
