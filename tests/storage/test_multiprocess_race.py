"""Several OS processes race on ONE SQLite file through the store.

Each process (tests/storage/race_worker.py, started with the "spawn" context)
opens its own store, waits on a barrier so that all of them really overlap,
and reports every call's outcome. The tests then check the final database
against those reports: exactly one accepted response per round, no lost
update, and no raw driver error (such as `database is locked`) ever escapes:
every failure a process sees is a typed M3 error.
"""

from __future__ import annotations

import json
import multiprocessing
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from m3grpc.storage import (
    EventKind,
    ManagedInputLease,
    ManagedInputStatus,
    SqlExecutionStore,
)
from m3grpc.types import ElicitationResponse
from tests.storage import race_worker
from tests.storage.conftest import ManualClock, make_round

ROUNDS = 30
JOIN_TIMEOUT_SECONDS = 120
HOME = {"shipping_address": {"action": "accept", "content": {"street": "1 Main", "city": "A"}}}
WORK = {"shipping_address": {"action": "accept", "content": {"street": "2 Side", "city": "B"}}}


def _responses(document: dict[str, Any]) -> dict[str, ElicitationResponse]:
    return {key: ElicitationResponse.model_validate(value) for key, value in document.items()}


def _create_rounds(store: SqlExecutionStore, count: int) -> dict[str, ManagedInputLease]:
    """`count` pending rounds (one execution each) whose owner's lease lasts the whole test."""
    leases: dict[str, ManagedInputLease] = {}
    clock = ManualClock(now=datetime.now(UTC))
    for _ in range(count):
        execution_id = store.create_execution(
            {"prompt": "p"}, human_input="managed"
        ).state.execution_id
        lease = ManagedInputLease(
            owner_id="worker-a",
            lease_token=f"tok-{uuid.uuid4().hex}",
            expires_at=datetime.now(UTC) + timedelta(minutes=30),
        )
        record = store.managed_input_store.create_round(
            make_round(execution_id, clock), lease=lease
        )
        leases[record.round_id] = lease
    return leases


def _race(database: str, tmp_path: Path, roles: dict[str, tuple[str, dict[str, Any]]]) -> dict:
    """Run one process per role on `database`; return each role's report."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(roles))
    processes = {}
    for name, (role, plan) in roles.items():
        result_path = str(tmp_path / f"{name}.json")
        processes[name] = context.Process(
            target=race_worker.run,
            args=(role, database, plan, result_path, barrier),
            name=f"race-{name}",
        )
    for process in processes.values():
        process.start()
    try:
        for process in processes.values():
            process.join(timeout=JOIN_TIMEOUT_SECONDS)
    finally:
        hung = [name for name, process in processes.items() if process.is_alive()]
        for process in processes.values():
            if process.is_alive():
                process.kill()
                process.join(timeout=10)
    assert not hung, f"processes did not finish within {JOIN_TIMEOUT_SECONDS}s: {hung}"
    reports = {}
    for name, process in processes.items():
        result_path = tmp_path / f"{name}.json"
        assert result_path.exists(), f"{name} exited with {process.exitcode} and no report"
        report = json.loads(result_path.read_text())
        assert report["unexpected"] == [], f"{name} raised an untyped error:\n" + "\n".join(
            report["unexpected"]
        )
        assert process.exitcode == 0, f"{name} exited with {process.exitcode}"
        reports[name] = report
    return reports


def _round_events(store: SqlExecutionStore) -> dict[str, list[tuple[EventKind, str | None]]]:
    events: dict[str, list[tuple[EventKind, str | None]]] = {}
    for event in store.read_events(after_seq=0, limit=100_000):
        if event.round_id is not None:
            events.setdefault(event.round_id, []).append((event.kind, event.status))
    return events


def test_concurrent_callers_exactly_one_response_wins_per_round(tmp_path: Path) -> None:
    database = str(tmp_path / "race.sqlite")
    store = SqlExecutionStore(database)
    try:
        round_ids = list(_create_rounds(store, ROUNDS))
        callers = {
            # name: (idempotency key, response)
            "alice": ("key-alice", HOME),
            "alice-retry": ("key-alice", HOME),  # the same submission, from another process
            "bob": ("key-bob", WORK),
            "mallory": ("key-alice", WORK),  # alice's key with another response
        }
        reports = _race(
            database,
            tmp_path,
            {
                name: (
                    "submit",
                    {"round_ids": round_ids, "idempotency_key": key, "responses": responses},
                )
                for name, (key, responses) in callers.items()
            },
        )
        outcomes = {
            name: {call["round_id"]: call["outcome"] for call in report["calls"]}
            for name, report in reports.items()
        }
        events = _round_events(store)
        winners: dict[str, int] = {}
        for round_id in round_ids:
            assert all(round_id in outcomes[name] for name in callers)
            won = [name for name in callers if outcomes[name][round_id] == "won"]
            assert len(won) == 1, f"round {round_id}: winners {won}, outcomes {outcomes}"
            winner = won[0]
            winners[winner] = winners.get(winner, 0) + 1
            win_key, win_response = callers[winner]
            for name, (key, response) in callers.items():
                if name == winner:
                    continue
                if key != win_key:
                    expected = "ManagedInputStateError"
                elif response == win_response:
                    expected = "replayed"
                else:
                    expected = "conflict:idempotency_key_reused"
                assert outcomes[name][round_id] == expected, (round_id, name, winner)
            record = store.managed_input_store.get_round(round_id)
            assert record.status is ManagedInputStatus.RESPONSE_VALIDATED
            assert record.idempotency_key == win_key
            assert record.responses == _responses(win_response)
            assert events[round_id] == [
                (EventKind.ROUND_PENDING, "pending"),
                (EventKind.ROUND_LEFT_PENDING, "response_validated"),
            ]
        assert sum(winners.values()) == ROUNDS
    finally:
        store.close()


def test_delivery_submission_and_renewal_in_parallel_lose_no_update(tmp_path: Path) -> None:
    database = str(tmp_path / "race.sqlite")
    store = SqlExecutionStore(database)
    try:
        delivery_leases = _create_rounds(store, ROUNDS)
        submit_leases = _create_rounds(store, ROUNDS)
        for round_id in delivery_leases:
            store.managed_input_store.submit_responses(
                round_id, _responses(HOME), idempotency_key="key-setup"
            )
        leases = {
            round_id: lease.model_dump(mode="json")
            for round_id, lease in {**delivery_leases, **submit_leases}.items()
        }
        reports = _race(
            database,
            tmp_path,
            {
                "deliverer": ("deliver", {"round_ids": list(delivery_leases), "leases": leases}),
                "caller": (
                    "submit",
                    {
                        "round_ids": list(submit_leases),
                        "idempotency_key": "key-caller",
                        "responses": WORK,
                    },
                ),
                "renewer": (
                    "renew",
                    {
                        # Interleave the rounds so renewals overlap delivery and submission.
                        "round_ids": [
                            r
                            for pair in zip(delivery_leases, submit_leases, strict=True)
                            for r in pair
                        ],
                        "leases": leases,
                        "passes": 3,
                        "base_seconds": 3600,
                    },
                ),
            },
        )

        # Every delivery step and every submission succeeded: renewals never got in the way.
        deliveries = reports["deliverer"]["calls"]
        assert [(c["op"], c["outcome"]) for c in deliveries] == [
            (op, "ok")
            for _ in delivery_leases
            for op in ("start_delivery", "mark_delivered", "resolve")
        ]
        submissions = reports["caller"]["calls"]
        assert [c["outcome"] for c in submissions] == ["won"] * ROUNDS

        renewals: dict[str, list[dict[str, Any]]] = {}
        for call in reports["renewer"]["calls"]:
            renewals.setdefault(call["round_id"], []).append(call)
        events = _round_events(store)
        for round_id, lease in {**delivery_leases, **submit_leases}.items():
            record = store.managed_input_store.get_round(round_id)
            history = [call["outcome"] for call in renewals[round_id]]
            assert len(history) == 3
            ok = [call for call in renewals[round_id] if call["outcome"] == "ok"]
            if round_id in delivery_leases:
                # Renewal succeeds until the round is resolved, then fails typed, forever.
                assert history == ["ok"] * len(ok) + ["ManagedInputStateError"] * (3 - len(ok))
                assert record.status is ManagedInputStatus.RESOLVED
                assert record.delivery_attempts == 1
                assert record.idempotency_key == "key-setup"
                assert record.responses == _responses(HOME)
                assert None not in (
                    record.delivery_started_at,
                    record.delivered_at,
                    record.resolved_at,
                )
                assert events[round_id] == [
                    (EventKind.ROUND_PENDING, "pending"),
                    (EventKind.ROUND_LEFT_PENDING, "response_validated"),
                    (EventKind.ROUND_CHANGED, "delivery_started"),
                    (EventKind.ROUND_CHANGED, "delivered"),
                    (EventKind.ROUND_CHANGED, "resolved"),
                ]
            else:
                assert history == ["ok"] * 3
                assert record.status is ManagedInputStatus.RESPONSE_VALIDATED
                assert record.idempotency_key == "key-caller"
                assert record.responses == _responses(WORK)
                assert events[round_id] == [
                    (EventKind.ROUND_PENDING, "pending"),
                    (EventKind.ROUND_LEFT_PENDING, "response_validated"),
                ]
            # The lease is the one the last successful renewal wrote (or the original one).
            assert record.lease is not None
            assert record.lease.lease_token == lease.lease_token
            expected_expiry = (
                datetime.fromisoformat(ok[-1]["expires_at"]) if ok else lease.expires_at
            )
            assert record.lease.expires_at == expected_expiry
    finally:
        store.close()
