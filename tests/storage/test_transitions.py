"""The transition tables of m3grpc/storage/transitions.py: the state machine's page
(docs/how-it-works/state-machine.md) shows the same rows, and a real store makes exactly
the moves they allow, from every state.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from m3grpc.errors import M3Error, ManagedInputRecoveryError, ManagedInputStateError
from m3grpc.storage import SqlExecutionStore, SqlManagedInputStore
from m3grpc.storage.transitions import (
    EXECUTION_RULES,
    OPEN_ROUND_STATES,
    ROUND_RULE,
    ROUND_RULES,
    Actor,
    Rule,
)
from m3grpc.types import (
    ElicitationResponse,
    ExecutionOutcome,
    ExecutionResult,
    ExecutionStatus,
    ManagedInputLease,
    ManagedInputStatus,
)
from tests.storage.conftest import ManualClock, make_round

S = ManagedInputStatus
PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-it-works" / "state-machine.md"
ANSWER = {"shipping_address": ElicitationResponse(action="decline")}
LEASE = timedelta(seconds=30)
DEADLINE = timedelta(minutes=10)


def page_tables() -> list[list[tuple[str, str, str]]]:
    """The (transition, method, who) rows of each table of the state machine's page."""
    section = PAGE.read_text()
    tables: list[list[tuple[str, str, str]]] = []
    current: list[tuple[str, str, str]] | None = None
    for line in section.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == "transition" or set(cells[0]) <= {"-"}:
            continue
        if current is None:
            current = []
            tables.append(current)
        current.append((cells[0], cells[1].strip("`"), cells[2]))
    return tables


def parse_row(
    transition: str, method: str, who: str, states: type[Any], open_states: frozenset[Any]
) -> tuple[str, frozenset[Any], Any, Actor]:
    source, target = transition.split(" -> ")
    if source == "(new)":
        from_states: frozenset[Any] = frozenset({None})
    elif source == "non-terminal":
        from_states = open_states
    else:
        from_states = frozenset(states(name) for name in source.split(", "))
    to_state = None if target == "(unchanged)" else states(target)
    # "who" names the actor, optionally followed by an explanation in parentheses.
    actor = Actor(re.sub(r"\s*\(.*$", "", who))
    return method, from_states, to_state, actor


def as_rows(rules: tuple[Rule[Any], ...]) -> list[tuple[str, frozenset[Any], Any, Actor]]:
    return [(r.method, r.from_states, r.to_state, r.actor) for r in rules]


def test_the_pages_tables_are_the_code_tables() -> None:
    round_table, execution_table = page_tables()
    assert [parse_row(*row, S, OPEN_ROUND_STATES) for row in round_table] == as_rows(ROUND_RULES)
    open_executions = frozenset(s for s in ExecutionStatus if s is not ExecutionStatus.FINISHED)
    assert [
        parse_row(*row, ExecutionStatus, open_executions) for row in execution_table
    ] == as_rows(EXECUTION_RULES)


def test_rule_methods_are_unique() -> None:
    assert len(ROUND_RULE) == len(ROUND_RULES)
    assert len({r.method for r in EXECUTION_RULES}) == len(EXECUTION_RULES)


class Walk:
    """One round brought to a given state by its worker and a caller, under the
    lease of the execution that owns it (a claimed, running execution). The round
    is resumable (it carries a harness resume token), so that the handover rules
    (`release`, `release_recovery`, `adopt_round`) can apply to it."""

    def __init__(
        self,
        execution_store: SqlExecutionStore,
        store: SqlManagedInputStore,
        clock: ManualClock,
        status: ManagedInputStatus,
    ) -> None:
        self.execution_store, self.store, self.clock = execution_store, store, clock
        execution_id = execution_store.create_execution(
            {"walk": status.value}, human_input="managed"
        ).state.execution_id
        claimed = execution_store.claim_next(owner_id="walker", lease_duration=LEASE)
        assert claimed is not None and claimed.execution_id == execution_id
        self.execution_id = execution_id
        self.lease: ManagedInputLease = claimed.lease
        # A deadline the walks do not reach, unless one moves the clock past it.
        round_ = make_round(execution_id, clock, deadline=clock() + DEADLINE)
        self.round_id = store.create_round(
            round_, lease=self.lease, harness_resume_token="{}"
        ).round_id
        path = {
            S.RESPONSE_VALIDATED: 1,
            S.DELIVERY_STARTED: 2,
            S.DELIVERED: 3,
            S.RESOLVED: 4,
        }.get(status, 0)
        steps = [
            lambda: store.submit_responses(self.round_id, ANSWER, idempotency_key="setup"),
            lambda: store.start_delivery(self.round_id, self.lease),
            lambda: store.mark_delivered(self.round_id, self.lease),
            lambda: store.resolve(self.round_id, self.lease),
        ]
        for step in steps[:path]:
            step()
        if status is S.FAILED:
            store.fail(self.round_id, self.lease, failure_code="broke", failure_message="it broke")
        assert self.status() is status

    def status(self) -> ManagedInputStatus:
        return self.store.get_round(self.round_id).status

    def make(self, method: str) -> None:
        """The move `method` made by its actor with valid credentials."""
        store, round_id, lease = self.store, self.round_id, self.lease
        if method == "submit_responses":
            store.submit_responses(round_id, ANSWER, idempotency_key="walk")
        elif method in ("start_delivery", "mark_delivered", "resolve"):
            getattr(store, method)(round_id, lease)
        elif method == "fail":
            store.fail(round_id, lease, failure_code="broke", failure_message="it broke")
        elif method == "fail_recovery":
            self.clock.advance(LEASE.total_seconds() + 1)
            store.fail_recovery(round_id)
        elif method == "finish_execution":
            self.execution_store.finish(
                self.execution_id,
                lease,
                ExecutionResult(
                    execution_id=self.execution_id,
                    outcome=ExecutionOutcome.SUCCEEDED,
                    finished_at=self.clock(),
                ),
            )
        elif method == "renew":
            store.renew(round_id, lease, lease_duration=LEASE * 2)
        elif method == "renew_leases":
            self.execution_store.renew_leases(
                lease.owner_id, {self.execution_id: lease.lease_token}, lease_duration=LEASE * 2
            )
        elif method == "claim_round":
            store.claim_round(round_id, owner_id=lease.owner_id, lease_duration=LEASE)
        elif method == "release":
            refused_unless(self.execution_store.release(self.execution_id, lease))
        elif method == "release_recovery":
            self.clock.advance(LEASE.total_seconds() + 1)
            refused_unless(self.execution_store.release_expired(self.execution_id))
        elif method == "adopt_round":
            # Only a released round can be adopted: release it, then claim it (a pending
            # one is claimed once its deadline passed; an answered one at once).
            refused_unless(self.execution_store.release(self.execution_id, lease))
            self.clock.advance(DEADLINE.total_seconds() + 1)
            claimed = self.execution_store.claim_next(owner_id="adopter", lease_duration=LEASE)
            assert claimed is not None and claimed.resumed_round_id == round_id
        else:
            raise AssertionError(f"no walk for {method}")

    def finish(self) -> None:
        """Leave no execution queued or running for the next walk's claim_next."""
        if self.execution_store.get_state(self.execution_id).lifecycle is ExecutionStatus.FINISHED:
            return
        self.clock.advance(LEASE.total_seconds() * 3)
        try:
            self.execution_store.fail_recovery(self.execution_id)
        except ManagedInputRecoveryError:  # released: no worker, no lease
            self.execution_store.request_cancel(self.execution_id)
        assert (
            self.execution_store.get_state(self.execution_id).lifecycle is ExecutionStatus.FINISHED
        )


def refused_unless(moved: bool) -> None:
    """The store's handover methods answer False (nothing changed) when the
    round cannot pass on: a refusal, as a typed error is for the other moves."""
    if not moved:
        raise ManagedInputStateError("the round was not handed over")


@pytest.mark.parametrize(
    "method", [rule.method for rule in ROUND_RULES if rule.method != "create_round"]
)
def test_every_round_rule_from_every_state(
    method: str,
    execution_store: SqlExecutionStore,
    store: SqlManagedInputStore,
    clock: ManualClock,
) -> None:
    """From every state, the move is made exactly when the table allows it, to the
    table's target; anywhere else it changes nothing (a rejected call raises a
    typed error, and finishing an execution leaves its closed rounds alone)."""
    rule = ROUND_RULE[method]
    for status in ManagedInputStatus:
        walk = Walk(execution_store, store, clock, status)
        before = store.get_round(walk.round_id)
        try:
            walk.make(method)
        except M3Error:
            assert not rule.allows(status), f"{method} from {status} was refused"
            assert store.get_round(walk.round_id) == before
        else:
            after = store.get_round(walk.round_id)
            if rule.allows(status):
                assert after.status is rule.target(status), f"{method} from {status}"
                assert after != before, f"{method} from {status} wrote nothing"
            else:
                # Only the execution finishing may pass over a closed round, untouched.
                assert rule.actor is Actor.EXECUTION or method == "renew_leases"
                assert after == before, f"{method} from {status} changed a closed round"
        walk.finish()


def test_create_round_is_the_only_rule_that_creates() -> None:
    creating = [rule.method for rule in ROUND_RULES if None in rule.from_states]
    assert creating == ["create_round"]
    assert ROUND_RULE["create_round"].creates() is S.PENDING
