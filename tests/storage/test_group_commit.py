"""Group commit on SQLite (m3grpc/storage/group_commit.py): the writes of one
process queued at the same moment share one transaction and one commit, yet each
caller sees only its own outcome (its success, its typed error, its refused
statement), and none returns before the commit holding its write is durable.

The writes are made to queue for certain: the test holds the turn with a write
of its own until every writer thread is queued behind it (`queued_writers`)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from m3grpc.errors import (
    ConflictKind,
    ManagedInputConflict,
    ManagedInputStateError,
    ManagedInputValidationError,
    StorageUnavailableError,
)
from m3grpc.storage import SqlExecutionStore
from m3grpc.storage.engine import (
    dispose_engine,
    queued_writers,
    write_transaction,
)
from m3grpc.storage.group_commit import MAX_GROUP
from m3grpc.types import ElicitationResponse, ManagedInputStatus
from tests.storage.conftest import ACCEPT, ManualClock, make_lease, make_round, new_execution
from tests.storage.probe import count_commits, hold_the_turn, insert, probe_engine, stored

MISSING_CITY = {
    "shipping_address": ElicitationResponse(action="accept", content={"street": "1 Main Street"})
}

Outcome = tuple[str, Any]  # ("ok", result) or ("error", exception)


class Writers:
    """Writer threads queued, in order, behind a write the test holds open."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.threads: list[threading.Thread] = []
        self.outcomes: dict[str, Outcome] = {}

    def queue(self, name: str, write: Callable[[], Any]) -> None:
        """Start a thread running `write`; return once it waits for the turn."""

        def run() -> None:
            try:
                self.outcomes[name] = ("ok", write())
            except Exception as exc:
                self.outcomes[name] = ("error", exc)

        thread = threading.Thread(target=run, name=name)
        self.threads.append(thread)
        thread.start()
        deadline = time.monotonic() + 60
        while queued_writers(self.engine) < len(self.threads):
            assert thread.is_alive(), f"{name} finished without queueing: {self.outcomes[name]}"
            assert time.monotonic() < deadline, f"{name} never queued"
            time.sleep(0.002)

    def join(self) -> dict[str, Outcome]:
        for thread in self.threads:
            thread.join(60)
            assert not thread.is_alive(), f"{thread.name} still waits"
        return self.outcomes


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: ManualClock) -> Iterator[SqlExecutionStore]:
    store = SqlExecutionStore(tmp_path / "group.sqlite", clock=clock)
    try:
        yield store
    finally:
        store.close()


def test_queued_responds_share_one_commit_each_with_its_own_outcome(
    sqlite_store: SqlExecutionStore, clock: ManualClock, tmp_path: Path
) -> None:
    store = sqlite_store.managed_input_store
    round_ids = [
        store.create_round(
            make_round(new_execution(sqlite_store), clock), lease=make_lease(clock), round_limit=3
        ).round_id
        for _ in range(6)
    ]
    commits = count_commits(store.engine)
    writers = Writers(store.engine)
    with write_transaction(store.engine):
        # Per round, in this order: content the schema refuses, the first answer,
        # its replay, and a second answer that finds the round answered by the
        # first one's write, uncommitted yet in the same transaction.
        for i, round_id in enumerate(round_ids):
            for name, responses, key in [
                (f"invalid-{i}", MISSING_CITY, f"invalid-{i}"),
                (f"first-{i}", ACCEPT, f"first-{i}"),
                (f"replay-{i}", ACCEPT, f"first-{i}"),
                (f"second-{i}", ACCEPT, f"second-{i}"),
            ]:
                writers.queue(
                    name,
                    lambda round_id=round_id, responses=responses, key=key: (
                        store.submit_responses_detailed(round_id, responses, idempotency_key=key)
                    ),
                )
    outcomes = writers.join()

    # 24 writes (and the held one), one commit.
    assert len(outcomes) == 24 < MAX_GROUP
    assert commits[0] == 1
    for i in range(len(round_ids)):
        kind, error = outcomes[f"invalid-{i}"]
        assert kind == "error" and isinstance(error, ManagedInputValidationError), error
        kind, first = outcomes[f"first-{i}"]
        assert kind == "ok" and not first.replayed, first
        assert first.record.idempotency_key == f"first-{i}"
        kind, replay = outcomes[f"replay-{i}"]
        assert kind == "ok" and replay.replayed, replay
        kind, error = outcomes[f"second-{i}"]
        assert kind == "error" and isinstance(error, ManagedInputStateError), error

    # What they were told is what another engine reads from the file.
    reopened = SqlExecutionStore(tmp_path / "group.sqlite", clock=clock)
    try:
        for i, round_id in enumerate(round_ids):
            record = reopened.managed_input_store.get_round(round_id)
            assert record.status is ManagedInputStatus.RESPONSE_VALIDATED
            assert record.idempotency_key == f"first-{i}"
            assert record.responses == ACCEPT
    finally:
        reopened.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    yield from probe_engine(tmp_path)


def test_a_failed_write_undoes_only_its_own_work(engine: sa.Engine) -> None:
    commits = count_commits(engine)
    writers = Writers(engine)
    refusal = ManagedInputConflict("refused", conflict_kind=ConflictKind.CONCURRENT_UPDATE)
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("INSERT INTO probe VALUES (0)")
        writers.queue("a", lambda: insert(engine, 1))
        writers.queue("duplicate", lambda: insert(engine, 2, 1))  # the constraint refuses 1
        writers.queue("typed", lambda: insert(engine, 3, then=refusal))
        writers.queue("b", lambda: insert(engine, 4))
    outcomes = writers.join()

    assert outcomes["a"] == ("ok", None)
    assert outcomes["b"] == ("ok", None)
    kind, error = outcomes["duplicate"]
    assert kind == "error" and isinstance(error, StorageUnavailableError), error
    assert outcomes["typed"] == ("error", refusal)  # its own exception, as raised
    assert commits[0] == 1
    assert stored(engine) == [0, 1, 4]  # neither 2 nor 3: their writes were undone


def test_a_write_that_ends_the_shared_transaction_fails_every_write_in_it(
    engine: sa.Engine,
) -> None:
    writers = Writers(engine)
    with pytest.raises(StorageUnavailableError), write_transaction(engine) as conn:
        conn.exec_driver_sql("INSERT INTO probe VALUES (0)")
        writers.queue("earlier", lambda: insert(engine, 1))
        writers.queue("ender", lambda: insert(engine, 666))
        writers.queue("later", lambda: insert(engine, 2))
    outcomes = writers.join()

    # The earlier writes were in the transaction SQLite rolled back: they are told
    # so (retryable), not that they succeeded. The later one began afresh.
    for name in ("earlier", "ender"):
        kind, error = outcomes[name]
        assert kind == "error" and isinstance(error, StorageUnavailableError), (name, error)
    assert outcomes["later"] == ("ok", None)
    assert stored(engine) == [2]


def test_a_lone_write_commits_by_itself(engine: sa.Engine) -> None:
    commits = count_commits(engine)
    insert(engine, 1)
    assert commits[0] == 1
    insert(engine, 2)
    assert commits[0] == 2
    assert stored(engine) == [1, 2]


def test_a_write_transaction_inside_another_on_one_thread_is_refused(engine: sa.Engine) -> None:
    # It would wait for its own thread's turn forever.
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("INSERT INTO probe VALUES (1)")
        with pytest.raises(RuntimeError), write_transaction(engine):
            pass
    assert stored(engine) == [1]


def test_closing_the_engine_while_writes_queue_lets_them_commit(engine: sa.Engine) -> None:
    # The store's close() returns the connection its writers keep between commits;
    # it must not take a writer's place in the queue: a writer handing the turn on
    # to it would wait for a commit that never comes.
    first, release = hold_the_turn(engine, 1)
    second = threading.Thread(target=insert, args=(engine, 2), daemon=True)
    second.start()
    deadline = time.monotonic() + 30
    while queued_writers(engine) < 1:
        assert time.monotonic() < deadline, "the second write never queued"
        time.sleep(0.002)
    closer = threading.Thread(target=dispose_engine, args=(engine,), daemon=True)
    closer.start()
    closer.join(30)
    release.set()
    for thread in (first, second, closer):
        thread.join(30)
        assert not thread.is_alive(), "a write or the close still waits"
    assert stored(engine) == [1, 2]


@pytest.mark.parametrize("writers", ["threads", "loop"])
def test_no_acknowledged_write_is_lost_when_the_process_is_killed(
    tmp_path: Path, writers: str
) -> None:
    database = tmp_path / "acked.sqlite"
    mode = ["loop"] if writers == "loop" else []
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.group_commit_writer", str(database), "12", *mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert process.stdout is not None
    acked: list[int] = []
    try:
        assert process.stdout.readline().strip() == "started"
        while len(acked) < 300:
            line = process.stdout.readline()
            assert line, "the writer process ended"
            acked.append(int(line.split()[1]))
        process.send_signal(signal.SIGKILL)
        acked += [int(line.split()[1]) for line in process.stdout if line.startswith("ack ")]
    finally:
        process.kill()
        process.wait()
    with sqlite3.connect(database) as db:
        rows = {row[0] for row in db.execute("SELECT id FROM acked")}
    assert set(acked) <= rows, sorted(set(acked) - rows)[:10]
