"""Tenant isolation, black-box: one `m3grpc serve` with three tokens (alice and bob
are users, root is an admin), over SQLite and (with M3_TEST_POSTGRES_URL) PostgreSQL.

Another principal's execution or round is NOT_FOUND, exactly like an ID that does
not exist (never PERMISSION_DENIED), for every RPC that names one; it never shows
in ListRounds or WatchPending, and an attempt to answer or cancel it changes
nothing. An admin sees and answers everything. Calls carry their token the
standard gRPC way (access-token call credentials on a TLS channel).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from m3grpc.api.auth import token_hash
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.api.conftest import BOOKED, Failure, ServerProcess, Stubs, expect_failure, write_config
from tests.storage.conftest import POSTGRES_URL, postgres_database
from tests.support.certs import Authority

TOKENS = {"alice": "alice-token-5d1e", "bob": "bob-token-c04b", "root": "root-token-aa93"}
ROLES = {"alice": "user", "bob": "user", "root": "admin"}
UNKNOWN_EXECUTION = "exe_00000000000000000000000000000000"
UNKNOWN_ROUND = "rnd_00000000000000000000000000000000"


@dataclass
class Service:
    server: ServerProcess
    ca: bytes

    def stubs(self, who: str) -> Stubs:
        credentials = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(root_certificates=self.ca),
            grpc.access_token_call_credentials(TOKENS[who]),
        )
        return Stubs(grpc.secure_channel(self.server.address, credentials))


def _database(request: pytest.FixtureRequest, tmp: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp / "m3.sqlite")
    else:
        yield from postgres_database()


@pytest.fixture(
    scope="module",
    params=[
        "sqlite",
        pytest.param(
            "postgres",
            marks=[
                pytest.mark.postgres,
                pytest.mark.skipif(POSTGRES_URL is None, reason="M3_TEST_POSTGRES_URL not set"),
            ],
        ),
    ],
)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp(f"tenants-{request.param}")
    ca = Authority.create(tmp / "pki")
    pair = ca.server()
    for database in _database(request, tmp):
        config = write_config(tmp / "m3.toml", database)
        extra = f'[tls]\ncert = "{pair.cert}"\nkey = "{pair.key}"\n'
        for who, token in TOKENS.items():
            extra += (
                f'[[auth.tokens]]\nprincipal = "{who}"\nrole = "{ROLES[who]}"\n'
                f'hash = "{token_hash(token)}"\n'
            )
        config.write_text(config.read_text() + extra)
        server = ServerProcess(config, tmp / "server.log").start()
        try:
            yield Service(server, ca.cert.read_bytes())
        finally:
            server.terminate()


@pytest.fixture
def alice(service: Service) -> Iterator[Stubs]:
    stubs = service.stubs("alice")
    yield stubs
    stubs.close()


@pytest.fixture
def bob(service: Service) -> Iterator[Stubs]:
    stubs = service.stubs("bob")
    yield stubs
    stubs.close()


@pytest.fixture
def root(service: Service) -> Iterator[Stubs]:
    stubs = service.stubs("root")
    yield stubs
    stubs.close()


def _same_as_missing(hidden: Failure, missing: Failure, identifier: str) -> None:
    """A hidden resource fails exactly as a missing one does, naming only the ID asked for."""
    assert hidden.code == missing.code == grpc.StatusCode.NOT_FOUND
    assert hidden.info.reason == missing.info.reason
    assert set(hidden.info.metadata) == set(missing.info.metadata)
    assert identifier in hidden.status.message


def _execution_calls(stubs: Stubs, execution_id: str) -> dict[str, Any]:
    def watch() -> None:
        call = stubs.executions.WatchPending(
            execution_service_pb2.WatchPendingRequest(execution_id=execution_id), timeout=30
        )
        next(iter(call))

    return {
        "Snapshot": lambda: stubs.executions.Snapshot(
            execution_service_pb2.SnapshotRequest(execution_id=execution_id), timeout=30
        ),
        "Result": lambda: stubs.executions.Result(
            execution_service_pb2.ResultRequest(execution_id=execution_id), timeout=30
        ),
        "Cancel": lambda: stubs.executions.Cancel(
            execution_service_pb2.CancelRequest(execution_id=execution_id), timeout=30
        ),
        "GetPending": lambda: stubs.elicitation.GetPending(
            elicitation_service_pb2.GetPendingRequest(execution_id=execution_id), timeout=30
        ),
        "WatchPending": watch,
    }


def _round_calls(stubs: Stubs, round_id: str) -> dict[str, Any]:
    return {
        "GetRound": lambda: stubs.elicitation.GetRound(
            elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
        ),
        "Respond": lambda: stubs.respond(round_id, "bob-key"),
    }


def _listed(stubs: Stubs, **filters: Any) -> set[str]:
    reply = stubs.elicitation.ListRounds(
        elicitation_service_pb2.ListRoundsRequest(page_size=1000, **filters), timeout=30
    )
    return {r.round_id for r in reply.rounds}


def test_another_principals_execution_and_round_are_not_found(alice: Stubs, bob: Stubs) -> None:
    execution_id = alice.submit_managed()
    round_id = alice.wait_pending(execution_id).round_id
    hidden_executions = _execution_calls(bob, execution_id)
    missing_executions = _execution_calls(bob, UNKNOWN_EXECUTION)
    for name, call in hidden_executions.items():
        hidden = expect_failure(call)
        _same_as_missing(hidden, expect_failure(missing_executions[name]), execution_id)
        assert hidden.info.reason == "EXECUTION_NOT_FOUND", name
    hidden_rounds = _round_calls(bob, round_id)
    missing_rounds = _round_calls(bob, UNKNOWN_ROUND)
    for name, call in hidden_rounds.items():
        hidden = expect_failure(call)
        _same_as_missing(hidden, expect_failure(missing_rounds[name]), round_id)
        assert hidden.info.reason == "ROUND_NOT_FOUND", name
    # Bob's attempts changed nothing: the round is still pending, the execution running.
    assert alice.wait_pending(execution_id).round_id == round_id
    state = alice.executions.Snapshot(
        execution_service_pb2.SnapshotRequest(execution_id=execution_id), timeout=30
    ).state
    assert state.lifecycle != execution_pb2.EXECUTION_STATUS_FINISHED
    # Alice answers her own round and gets her result.
    reply = alice.respond(round_id, "alice-key")
    assert reply.status != elicitation_pb2.MANAGED_INPUT_STATUS_PENDING
    result = alice.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    assert result.operations[0].result["structuredContent"]["result"] == BOOKED


def test_list_rounds_and_watch_pending_show_only_ones_own(alice: Stubs, bob: Stubs) -> None:
    alices = alice.submit_managed()
    alice_round = alice.wait_pending(alices).round_id
    bobs = bob.submit_managed()
    bob_round = bob.wait_pending(bobs).round_id

    assert alice_round not in _listed(bob) and bob_round in _listed(bob)
    assert bob_round not in _listed(alice) and alice_round in _listed(alice)
    assert _listed(bob, execution_id=alices) == set()

    # Bob's watch: the snapshot is ordered by creation, so Alice's older round
    # would come before his own if he could see it.
    call = bob.executions.WatchPending(execution_service_pb2.WatchPendingRequest(), timeout=30)
    seen: list[str] = []
    for event in call:
        if event.HasField("round_pending"):
            seen.append(event.round_pending.round_id)
            if seen[-1] == bob_round:
                break
    call.cancel()
    assert alice_round not in seen and bob_round in seen
    for stubs, execution_id, round_id in ((alice, alices, alice_round), (bob, bobs, bob_round)):
        stubs.respond(round_id, "done")
        stubs.result(execution_id)


def test_an_admin_sees_and_answers_every_execution(alice: Stubs, root: Stubs) -> None:
    execution_id = alice.submit_managed()
    round_id = alice.wait_pending(execution_id).round_id
    assert round_id in _listed(root)
    assert root.wait_pending(execution_id).round_id == round_id
    root.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
    )
    root.respond(round_id, "root-key")
    assert root.result(execution_id).outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    # An admin's own submission is still invisible to a user.
    own = root.submit_managed()
    expect_failure(
        alice.executions.Cancel, execution_service_pb2.CancelRequest(execution_id=own), timeout=30
    )
    root.executions.Cancel(execution_service_pb2.CancelRequest(execution_id=own), timeout=30)


def test_a_request_id_is_scoped_to_its_principal(alice: Stubs, bob: Stubs) -> None:
    first = alice.submit_managed(request_id="shared-request-1")
    assert alice.submit_managed(request_id="shared-request-1") == first  # AIP-155 replay
    other = bob.submit_managed(request_id="shared-request-1")
    assert other != first
    for stubs, execution_id in ((alice, first), (bob, other)):
        stubs.executions.Cancel(
            execution_service_pb2.CancelRequest(execution_id=execution_id), timeout=30
        )
