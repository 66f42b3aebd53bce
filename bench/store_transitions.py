"""How many round transitions per second the SQLite store commits, against the raw limit.

Measures, in one run on one machine:

  (i)   raw: committed SQLite transactions per second with the plain sqlite3 module
        (WAL, BEGIN IMMEDIATE, one small INSERT per transaction, one connection),
        with synchronous=FULL (the store's default) and NORMAL;
  (ii)  store: full round cycles per second through SqlManagedInputStore on SQLite,
        synchronous=FULL, in the transactions the runtime commits for one round
        (m3grpc/runtime/resolvers.py; `python bench/commits_per_round.py` lists them):
        create_round; submit_responses (the Respond, its record built as the service
        builds it for the waiting worker); start_delivery; resolve with mark_delivered
        (the server's reply is both the answer's receipt and the operation's end) and
        the operation's result stored: 5 transitions in 4 transactions. With
        `--sequence separate`: the 5 transitions each in its own transaction, as the
        runtime committed them before (create_round -> submit_responses ->
        start_delivery -> mark_delivered -> resolve);
  (iii) the same store cycles with synchronous=NORMAL, for reference;
  (iv)  with --threads N: the store cycles from N threads at once, as the runtime's
        store threads run them under load, and how many commits they took (group
        commit: writes queued at the same moment share one).

Each line also gives this process's CPU time per transaction (raw) or cycle (store),
which a loaded machine distorts far less than the rates. Every measurement uses a fresh
database file, runs a few untimed warm-up
iterations, then a fixed number of timed ones: it stops by itself.

    python bench/store_transitions.py [--cycles 300] [--threads 16] [--sequence runtime|separate]
                                      [--database-dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
TRANSITIONS_PER_CYCLE = 5
# Transactions per cycle, by sequence (see the module docstring).
COMMITS_PER_CYCLE = {"runtime": 4, "separate": 5}
WARMUP = 10


@dataclass
class Measurement:
    name: str
    synchronous: str
    iterations: int  # timed transactions (raw) or round cycles (store)
    seconds: float
    transactions_per_second: float
    cycles_per_second: float | None = None
    ratio_to_raw_full: float | None = None
    ratio_to_raw_same_sync: float | None = None
    threads: int = 1
    commits: int | None = None  # write transactions committed (store runs)
    # This process's CPU time per timed iteration, ms: what a busy machine's
    # scheduling does not distort, unlike the wall-clock rates.
    cpu_ms_per_iteration: float | None = None


def bench_raw(path: Path, synchronous: str, transactions: int) -> Measurement:
    """Committed BEGIN IMMEDIATE transactions per second, one small INSERT each."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, round_id TEXT, status TEXT)")

        def one(i: int) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (round_id, status) VALUES (?, ?)", (f"r{i}", "pending"))
            conn.execute("COMMIT")

        for i in range(WARMUP):
            one(i)
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(transactions):
            one(i)
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
    finally:
        conn.close()
    return Measurement(
        name="raw sqlite3 commit (1 INSERT)",
        synchronous=synchronous,
        iterations=transactions,
        seconds=seconds,
        transactions_per_second=transactions / seconds,
        cpu_ms_per_iteration=cpu * 1000 / transactions,
    )


def bench_store(
    path: Path, synchronous: str, cycles: int, threads: int = 1, sequence: str = "runtime"
) -> Measurement:
    """Full round cycles per second through SqlManagedInputStore (5 transitions each,
    committed as `sequence` says), from `threads` threads at once."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from m3grpc.storage import ManagedInputLease, SqlExecutionStore
    from m3grpc.types import (
        ElicitationResponse,
        FormElicitationRequest,
        OperationResult,
        PendingElicitationRound,
    )

    schema = {
        "type": "object",
        "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        "required": ["street", "city"],
    }
    request = FormElicitationRequest(message="Where to?", requested_schema=schema)
    responses = {
        "address": ElicitationResponse(action="accept", content={"street": "1 Main", "city": "A"})
    }
    # What the operation returned: stored with its round's resolve, as the runtime does.
    result = OperationResult(
        logical_operation_id="op-0",
        server="bench",
        operation_kind="tool",
        operation_name="book",
        ok=True,
        result={"content": [{"type": "text", "text": "booked"}], "isError": False},
    )
    execution_store = SqlExecutionStore(path, sqlite_synchronous=synchronous)  # type: ignore[arg-type]
    store = execution_store.managed_input_store
    try:
        # Executions and round inputs are prepared untimed: only transitions are measured.
        total = WARMUP + cycles
        execution_ids = [
            execution_store.create_execution({"n": i}, human_input="managed").state.execution_id
            for i in range(total)
        ]
        now = datetime.now(UTC)
        rounds = [
            (
                PendingElicitationRound(
                    round_id=f"rnd_{uuid.uuid4().hex}",
                    execution_id=execution_id,
                    logical_operation_id="op-0",
                    server="bench",
                    operation_kind="tool",
                    operation_name="book",
                    requests={"address": request},
                    created_at=now,
                ),
                ManagedInputLease(
                    owner_id="bench-worker",
                    lease_token=f"tok-{uuid.uuid4().hex}",
                    expires_at=now + timedelta(hours=1),
                ),
            )
            for execution_id in execution_ids
        ]

        def cycle(index: int) -> None:
            pending, lease = rounds[index]
            store.create_round(pending, lease=lease)
            if sequence == "separate":
                store.submit_responses(pending.round_id, responses, idempotency_key=f"k{index}")
                store.start_delivery(pending.round_id, lease)
                store.mark_delivered(pending.round_id, lease)
                record = store.resolve(pending.round_id, lease)
            else:
                # As the service's Respond (its record wakes the waiting worker) and
                # the runtime's resolver (m3grpc/runtime/resolvers.py) make them.
                submitted = store.submit_responses_detailed(
                    pending.round_id, responses, idempotency_key=f"k{index}"
                )
                assert submitted.record.status.value == "response_validated"
                store.start_delivery(pending.round_id, lease)
                record = store.resolve(
                    pending.round_id, lease, operation=result, last=True, mark_delivered=True
                )
            assert record.status.value == "resolved"

        commits = [0]

        def on_commit() -> None:
            commits[0] += 1

        for i in range(WARMUP):
            cycle(i)
        # The store's own hook: once per committed write transaction (a group
        # commit's writes share one), never for a read.
        execution_store.add_commit_listener(on_commit)
        with ThreadPoolExecutor(threads) as pool:
            start, cpu = time.perf_counter(), time.process_time()
            if threads == 1:
                for i in range(WARMUP, total):
                    cycle(i)
            else:
                list(pool.map(cycle, range(WARMUP, total)))
            seconds = time.perf_counter() - start
            cpu = time.process_time() - cpu
    finally:
        execution_store.close()
    return Measurement(
        name=f"store round cycle ({COMMITS_PER_CYCLE[sequence]} commits)"
        + (f", {threads} threads" if threads > 1 else ""),
        synchronous=synchronous,
        iterations=cycles,
        seconds=seconds,
        transactions_per_second=cycles * TRANSITIONS_PER_CYCLE / seconds,
        cycles_per_second=cycles / seconds,
        threads=threads,
        commits=commits[0],
        cpu_ms_per_iteration=cpu * 1000 / cycles,
    )


def run(
    cycles: int, directory: Path, threads: int = 1, sequence: str = "runtime"
) -> list[Measurement]:
    raw_transactions = cycles * TRANSITIONS_PER_CYCLE
    raw = {
        sync: bench_raw(directory / f"raw-{sync.lower()}.sqlite", sync, raw_transactions)
        for sync in ("FULL", "NORMAL")
    }
    store = [
        bench_store(directory / f"store-{sync.lower()}.sqlite", sync, cycles, sequence=sequence)
        for sync in ("FULL", "NORMAL")
    ]
    if threads > 1:
        store.append(
            bench_store(
                directory / "store-threads.sqlite",
                "FULL",
                cycles,
                threads=threads,
                sequence=sequence,
            )
        )
    results = [*raw.values(), *store]
    for m in results:
        m.ratio_to_raw_full = m.transactions_per_second / raw["FULL"].transactions_per_second
        m.ratio_to_raw_same_sync = (
            m.transactions_per_second / raw[m.synchronous].transactions_per_second
        )
    return results


def table(results: list[Measurement]) -> str:
    header = (
        f"{'measurement':<35} {'sync':<6} {'n':>6} {'seconds':>8} "
        f"{'cycles/s':>9} {'tx/s':>9} {'/raw FULL':>9} {'/raw same':>9} {'commits':>8} "
        f"{'CPU ms/it':>9}"
    )
    lines = [header, "-" * len(header)]
    for m in results:
        cycles = f"{m.cycles_per_second:9.1f}" if m.cycles_per_second is not None else f"{'-':>9}"
        commits = f"{m.commits:>8}" if m.commits is not None else f"{'-':>8}"
        lines.append(
            f"{m.name:<35} {m.synchronous:<6} {m.iterations:>6} {m.seconds:>8.3f} "
            f"{cycles} {m.transactions_per_second:>9.1f} "
            f"{m.ratio_to_raw_full:>9.2f} {m.ratio_to_raw_same_sync:>9.2f} {commits} "
            f"{m.cpu_ms_per_iteration or 0:>9.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cycles", type=int, default=300, help="timed round cycles per store run (default 300)"
    )
    parser.add_argument(
        "--database-dir",
        type=Path,
        default=None,
        help="where to put the database files (default: a temporary directory, removed after)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="also run the FULL store cycles from this many threads at once (default 1: not)",
    )
    parser.add_argument(
        "--sequence",
        choices=sorted(COMMITS_PER_CYCLE),
        default="runtime",
        help="runtime (default): the round's transitions in the transactions the runtime "
        "commits them in (4); separate: each of the 5 in its own transaction",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.cycles < 1:
        parser.error("--cycles must be at least 1")
    if args.threads < 1:
        parser.error("--threads must be at least 1")

    temporary = args.database_dir is None
    directory = Path(tempfile.mkdtemp(prefix="m3-bench-")) if temporary else args.database_dir
    directory.mkdir(parents=True, exist_ok=True)
    run_directory = Path(tempfile.mkdtemp(prefix="run-", dir=directory))
    try:
        results = run(args.cycles, run_directory, args.threads, args.sequence)
    finally:
        shutil.rmtree(directory if temporary else run_directory, ignore_errors=True)

    environment: dict[str, Any] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "database_dir": str(directory),
        "transitions_per_cycle": TRANSITIONS_PER_CYCLE,
        "sequence": args.sequence,
        "commits_per_cycle": COMMITS_PER_CYCLE[args.sequence],
    }
    if args.json:
        print(
            json.dumps(
                {"environment": environment, "results": [asdict(m) for m in results]}, indent=2
            )
        )
    else:
        print(
            f"SQLite {environment['sqlite']}, Python {environment['python']}, "
            f"{environment['platform']}; files in {directory}"
        )
        print(table(results))
        store_full, raw_full = results[2], results[0]
        assert store_full.cycles_per_second is not None
        cycle_ms = 1000 / store_full.cycles_per_second
        commit_ms = 1000 / raw_full.transactions_per_second
        print(
            f"\nstore, synchronous=FULL: {store_full.cycles_per_second:.1f} cycles/s = "
            f"{store_full.transactions_per_second:.1f} transitions/s; a cycle "
            f"({TRANSITIONS_PER_CYCLE} transitions, {COMMITS_PER_CYCLE[args.sequence]} commits) "
            f"{cycle_ms:.2f} ms = {cycle_ms / commit_ms:.1f}x a bare commit ({commit_ms:.3f} ms); "
            f"CPU {store_full.cpu_ms_per_iteration or 0:.3f} ms per cycle"
        )
        if args.threads > 1:
            many = results[-1]
            print(
                f"store, {args.threads} threads: {many.cycles_per_second:.1f} cycles/s "
                f"({many.cycles_per_second / store_full.cycles_per_second:.2f}x one thread), "
                f"{many.commits} commits for {many.iterations * TRANSITIONS_PER_CYCLE} transitions"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
