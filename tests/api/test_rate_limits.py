"""Rate limits per principal, black-box: one `m3grpc serve` over TLS with a token
per principal and `[rate_limits]` of burst 2 at 0.5 calls per second for Submit
and Respond.

A principal past its burst gets RESOURCE_EXHAUSTED (RATE_LIMITED) with RetryInfo,
and the refused call changes nothing: no execution is stored, the round stays
pending, the idempotency key stays unused. Other principals are unaffected, and
after the RetryInfo delay the same call succeeds. Each test uses principals of
its own, so the buckets of one test never meet another's.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2

from m3grpc.api.auth import token_hash
from m3grpc.api.config import RateLimits
from m3grpc.api.rate_limits import Rate, RateLimiter
from m3grpc.errors import RateLimitedError
from m3grpc.wire.gen.m3.v1 import (
    elicitation_pb2,
    elicitation_service_pb2,
    execution_pb2,
    execution_service_pb2,
)
from tests.api.conftest import (
    ADDRESS,
    BOOKED,
    Failure,
    ServerProcess,
    Stubs,
    expect_failure,
    write_config,
)
from tests.support.certs import Authority

PRINCIPALS = ("alice", "bob", "carol", "dave")
RATE = 0.5  # tokens per second: a refused call waits at most 2 s
BURST = 2
UNKNOWN_ROUND = "rnd_00000000000000000000000000000000"


def _token(who: str) -> str:
    return f"{who}-token-7f3c"


@dataclass
class Service:
    server: ServerProcess
    ca: bytes
    database: Path

    def stubs(self, who: str) -> Stubs:
        credentials = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(root_certificates=self.ca),
            grpc.access_token_call_credentials(_token(who)),
        )
        return Stubs(grpc.secure_channel(self.server.address, credentials))

    def executions_of(self, who: str) -> int:
        with sqlite3.connect(self.database) as db:
            (count,) = db.execute(
                "SELECT count(*) FROM m3_executions WHERE principal = ?", (who,)
            ).fetchone()
        return int(count)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("rate-limits")
    ca = Authority.create(tmp / "pki")
    pair = ca.server()
    database = tmp / "m3.sqlite"
    config = write_config(tmp / "m3.toml", database)
    extra = f'[tls]\ncert = "{pair.cert}"\nkey = "{pair.key}"\n'
    extra += (
        f"[rate_limits]\nsubmit_per_second = {RATE}\nsubmit_burst = {BURST}\n"
        f"respond_per_second = {RATE}\nrespond_burst = {BURST}\n"
    )
    for who in PRINCIPALS:
        extra += f'[[auth.tokens]]\nprincipal = "{who}"\nhash = "{token_hash(_token(who))}"\n'
    config.write_text(config.read_text() + extra)
    server = ServerProcess(config, tmp / "server.log").start()
    try:
        yield Service(server, ca.cert.read_bytes(), database)
    finally:
        server.terminate()


@pytest.fixture
def clients(service: Service) -> Iterator[dict[str, Stubs]]:
    opened = {who: service.stubs(who) for who in PRINCIPALS}
    yield opened
    for stubs in opened.values():
        stubs.close()


def _submit(stubs: Stubs, request_id: str) -> str:
    """Submits a book_shipment whose elicitation the plan answers (it needs no worker long)."""
    rule = execution_pb2.ElicitationRule(request_key="shipping_address")
    rule.accept_content.update(ADDRESS)
    spec = execution_pb2.OperationSpec(
        server="shipping",
        operation=execution_pb2.OperationStep(
            kind=execution_pb2.OPERATION_KIND_TOOL, name="book_shipment"
        ),
        elicitation_plan=execution_pb2.ElicitationPlan(rules=[rule]),
    )
    reply = stubs.executions.Submit(
        execution_service_pb2.SubmitRequest(
            operation=spec, human_input=execution_pb2.HUMAN_INPUT_FAIL, request_id=request_id
        ),
        timeout=30,
    )
    return str(reply.execution_id)


def _rate_limited(failure: Failure, method: str) -> float:
    """Checks a RATE_LIMITED status and returns its RetryInfo delay in seconds."""
    assert failure.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert failure.info.reason == "RATE_LIMITED"
    assert dict(failure.info.metadata) == {"method": method, "per_second": "0.5", "burst": "2"}
    # Principal-free: neither the metadata nor the message names the caller.
    assert not any(who in str(failure.status) for who in PRINCIPALS)
    delay = failure.detail(error_details_pb2.RetryInfo).retry_delay.ToTimedelta().total_seconds()
    assert 0 < delay <= 1 / RATE  # an empty bucket refills one token within 1/rate
    return float(delay)


def test_a_principal_past_its_submit_burst_is_refused_and_others_are_not(
    service: Service, clients: dict[str, Stubs]
) -> None:
    alice, bob = clients["alice"], clients["bob"]
    for index in range(BURST):
        _submit(alice, f"alice-{index}")
    stored = service.executions_of("alice")

    refused = expect_failure(_submit, alice, "alice-late")
    delay = _rate_limited(refused, "Submit")
    assert service.executions_of("alice") == stored  # no execution was created

    # Bob has a bucket of his own.
    for index in range(BURST):
        _submit(bob, f"bob-{index}")

    time.sleep(delay)
    _submit(alice, "alice-late")  # the request ID was not used up: a new execution
    assert service.executions_of("alice") == stored + 1


def test_a_refused_respond_leaves_the_round_pending_and_its_key_unused(
    clients: dict[str, Stubs],
) -> None:
    carol, dave = clients["carol"], clients["dave"]
    execution_id = carol.submit_managed()
    round_id = carol.wait_pending(execution_id).round_id
    # Every Respond call counts, whatever its outcome: two on a missing round empty the bucket.
    for index in range(BURST):
        failed = expect_failure(carol.respond, UNKNOWN_ROUND, f"probe-{index}")
        assert failed.info.reason == "ROUND_NOT_FOUND"

    refused = expect_failure(carol.respond, round_id, "carol-answer")
    delay = _rate_limited(refused, "Respond")
    current = carol.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
    ).round
    assert current.status == elicitation_pb2.MANAGED_INPUT_STATUS_PENDING

    # Dave's Respond bucket is full: his (missing) round is answered NOT_FOUND, not limited.
    assert expect_failure(dave.respond, UNKNOWN_ROUND, "dave").info.reason == "ROUND_NOT_FOUND"

    time.sleep(delay)
    reply = carol.respond(round_id, "carol-answer")
    assert not reply.replayed  # the refused call did not use the key
    assert reply.status != elicitation_pb2.MANAGED_INPUT_STATUS_PENDING
    result = carol.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED
    assert result.operations[0].result["structuredContent"]["result"] == BOOKED


# -- the buckets, on a clock the test moves -----------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_buckets_are_per_principal_and_method_and_anonymous_callers_share_one() -> None:
    clock = Clock()
    limiter = RateLimiter(
        {"Submit": Rate(per_second=0.5, burst=2), "Respond": Rate(per_second=4, burst=1)},
        clock=clock,
    )
    for _ in range(2):
        limiter.check("Submit", None)
    with pytest.raises(RateLimitedError) as refused:
        limiter.check("Submit", None)  # any other anonymous caller: the same bucket
    assert refused.value.retry_after_seconds == pytest.approx(2.0)
    assert refused.value.metadata == {"method": "Submit", "per_second": "0.5", "burst": "2"}
    limiter.check("Respond", None)  # another method, another bucket
    limiter.check("Submit", "alice")  # another principal, another bucket
    clock.now += 1.0  # half a token back: still refused, for the other half
    with pytest.raises(RateLimitedError) as again:
        limiter.check("Submit", None)
    assert again.value.retry_after_seconds == pytest.approx(1.0)
    clock.now += 1.0
    limiter.check("Submit", None)
    clock.now += 3600.0  # a long pause refills up to the burst, not beyond
    for _ in range(2):
        limiter.check("Submit", None)
    with pytest.raises(RateLimitedError):
        limiter.check("Submit", None)


def test_rate_limits_are_off_unless_configured() -> None:
    assert RateLimiter.for_config(RateLimits()) is None
    limiter = RateLimiter.for_config(RateLimits(respond_per_second=2.5))
    assert limiter is not None
    assert limiter.limits("Respond") and not limiter.limits("Submit")
    for _ in range(3):  # the burst defaults to the rate rounded up
        limiter.check("Respond", "alice")
    with pytest.raises(RateLimitedError):
        limiter.check("Respond", "alice")
