"""What the sweeper (m3grpc/runtime/sweeper.py) and the reads `as_read` cost with N
paused executions, with the sweep's indexes (revision 0003) and without them.

Every process that runs the runtime sweeps at each deadline and lease expiry it
knows of; on SQLite its store calls run on the event loop, so a pass must not
scan every paused execution. One run on one machine: N executions waiting for
input, each holding a live lease and a pending round with a deadline a day away
(nothing is due, as in a service where every worker is alive), then, timed:

  - one sweep pass (recovery's reads, released rounds past their deadline, the
    next due instant);
  - GetPending's read of one execution, as stored and `as_read`;
  - a page of 50 pending rounds across executions (ListRounds, WatchPending's
    snapshot), as stored and `as_read`;

then the same pass after dropping the three sweep indexes, and the ratio.

    python bench/sweep_pass.py [--executions 20000] [--database URL_OR_SQLITE_PATH]

Without --database: a SQLite file in a temporary directory. A PostgreSQL URL must
name an empty database (it is filled and left so).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from m3grpc.runtime.lifecycle import Lifecycle
from m3grpc.runtime.sweeper import Sweeper
from m3grpc.storage import SqlExecutionStore
from m3grpc.storage.schema import executions, rounds
from m3grpc.types import ManagedInputStatus

SWEEP_INDEXES = (
    "ix_m3_executions_lease_expiry",
    "ix_m3_rounds_status_deadline",
    "ix_m3_rounds_status_lease",
)
PENDING = [ManagedInputStatus.PENDING]


class _NoWakes:
    def notify(self, *args: Any) -> None:
        pass


def _url(database: str) -> str:
    return database if "://" in database else f"sqlite:///{database}"


def fill(database: str, store: SqlExecutionStore, count: int) -> str:
    """`count` paused executions held by a live worker; returns one execution's ID."""
    now = store.now()
    lease = now + timedelta(hours=1)
    request = {"mode": "form", "message": "m", "requested_schema": {"type": "object"}}
    execution_rows, round_rows = [], []
    for _ in range(count):
        execution_id = f"exe_{uuid.uuid4().hex}"
        execution_rows.append(
            {
                "execution_id": execution_id,
                "spec": {},
                "human_input": "managed",
                "lifecycle": "waiting_for_input",
                "cancel_requested": False,
                "worker_owner_id": "worker",
                "worker_lease_token": "token",
                "worker_lease_expires_at": lease,
                "created_at": now,
                "updated_at": now,
            }
        )
        round_rows.append(
            {
                "round_id": f"rnd_{uuid.uuid4().hex}",
                "execution_id": execution_id,
                "logical_operation_id": "op-0",
                "server": "shipping",
                "operation_kind": "tool",
                "operation_name": "book",
                "requests": {"shipping_address": request},
                "deadline": now + timedelta(days=1),
                "round_index": 0,
                "round_limit": 1,
                "status": "pending",
                "owner_id": "worker",
                "lease_token": "token",
                "lease_expires_at": lease,
                "operation_parameters": {},
                "delivery_attempts": 0,
                "created_at": now,
                "updated_at": now,
            }
        )
    engine = sa.create_engine(_url(database))
    try:
        with engine.begin() as conn:
            conn.execute(executions.insert(), execution_rows)
            conn.execute(rounds.insert(), round_rows)
        if engine.dialect.name == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(sa.text("ANALYZE"))
    finally:
        engine.dispose()
    return str(execution_rows[count // 2]["execution_id"])


def timed(call: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(p50, p99) in milliseconds of `repeats` calls after 5 untimed ones."""
    for _ in range(5):
        call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[max(0, int(len(times) * 0.99) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=20_000)
    parser.add_argument("--database", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        database = args.database or str(Path(tmp) / "m3.sqlite")
        store = SqlExecutionStore(database)
        try:
            execution_id = fill(database, store, args.executions)
            sweeper = Sweeper(
                store,
                _NoWakes(),  # type: ignore[arg-type]
                Lifecycle(),
                live=frozenset,
                on_released=lambda: None,
                lease_duration=timedelta(seconds=30),
            )
            reads = store.managed_input_store
            print(f"{args.executions} paused executions, {store.dialect}")
            rows = {
                "sweep pass": lambda: sweeper.sweep(),
                "GetPending, stored": lambda: reads.list_rounds(
                    execution_id=execution_id, statuses=PENDING, limit=2
                ),
                "GetPending, as_read": lambda: reads.list_rounds(
                    execution_id=execution_id, statuses=PENDING, limit=2, as_read=True
                ),
                "50 pending rounds, stored": lambda: reads.list_rounds(statuses=PENDING, limit=50),
                "50 pending rounds, as_read": lambda: reads.list_rounds(
                    statuses=PENDING, limit=50, as_read=True
                ),
            }
            results = {}
            for name, call in rows.items():
                results[name] = timed(call, 200 if "GetPending" in name else 50)
                print(
                    f"  {name:28} p50 {results[name][0]:8.2f} ms   p99 {results[name][1]:8.2f} ms"
                )
            engine = sa.create_engine(_url(database))
            with engine.begin() as conn:
                for name in SWEEP_INDEXES:
                    conn.execute(sa.text(f"DROP INDEX {name}"))
            engine.dispose()
            without = timed(lambda: sweeper.sweep(), 50)
            name = "sweep pass, no sweep index"
            print(f"  {name:28} p50 {without[0]:8.2f} ms   p99 {without[1]:8.2f} ms")
            ratio = without[0] / results["sweep pass"][0]
            print(f"  the indexes make a pass {ratio:.0f}x faster (p50)")
        finally:
            store.close()


if __name__ == "__main__":
    main()
