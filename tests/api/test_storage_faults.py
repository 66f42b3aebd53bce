"""Storage faults, black-box: `m3grpc serve` on a database that refuses a commit,
stays locked past the busy timeout, runs out of file space, or (PostgreSQL)
restarts under load.

What callers rely on: a retryable typed error (UNAVAILABLE with
STORAGE_UNAVAILABLE and a RetryInfo delay, or ABORTED with
MANAGED_INPUT_CONFLICT), never INTERNAL or UNKNOWN; nothing half-written (the
refused round is still pending with no response, no event, no key); the same
Respond with the same idempotency key succeeds once the fault clears, without
restarting the service, and the execution finishes.

Every wait is a bounded loop; nothing asserts on elapsed time.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from google.rpc import error_details_pb2

from m3grpc.wire.gen.m3.v1 import elicitation_service_pb2, execution_pb2

from .conftest import (
    ROOT,
    ServerProcess,
    Stubs,
    expect_failure,
    failure,
    respond_request,
    write_config,
)
from .test_health import NOT_SERVING, SERVING, _fast_checks, _free_port, _pg_ctl, _wait_for

STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"


@contextlib.contextmanager
def _sqlite_service(tmp: Path) -> Iterator[tuple[ServerProcess, Stubs, Path]]:
    database = tmp / "m3.sqlite"
    config = _fast_checks(write_config(tmp / "m3.toml", database))
    server = ServerProcess(config, tmp / "server.log").start()
    stubs = server.stubs()
    try:
        yield server, stubs, database
    finally:
        stubs.close()
        server.stop()


def _paused(stubs: Stubs) -> tuple[str, str]:
    execution_id = stubs.submit_managed()
    return execution_id, stubs.wait_pending(execution_id).round_id


def _assert_unavailable(refused: object) -> None:
    assert isinstance(refused, grpc.RpcError)
    typed = failure(refused)
    assert typed.code == grpc.StatusCode.UNAVAILABLE, typed.status
    assert typed.info.reason == STORAGE_UNAVAILABLE, typed.status
    delay = typed.detail(error_details_pb2.RetryInfo).retry_delay
    assert 0 < delay.ToTimedelta().total_seconds() <= 10
    # The caller never sees the driver's text (it may quote stored values).
    assert "sqlite" not in typed.status.message.lower()
    assert "Traceback" not in typed.status.message


def _round_row(database: Path, round_id: str) -> tuple[str, object, object, int]:
    """(status, responses, idempotency_key, events of the round), read directly."""
    with contextlib.closing(sqlite3.connect(database, timeout=30)) as conn:
        status, responses, key = conn.execute(
            "SELECT status, responses, idempotency_key FROM m3_managed_input_rounds "
            "WHERE round_id = ?",
            (round_id,),
        ).fetchone()
        (events,) = conn.execute(
            "SELECT count(*) FROM m3_events WHERE round_id = ?", (round_id,)
        ).fetchone()
    return str(status), responses, key, int(events)


def _assert_untouched(
    database: Path, round_id: str, before: tuple[str, object, object, int]
) -> None:
    status, responses, key, events = _round_row(database, round_id)
    assert status == "pending"
    assert responses is None and key is None
    assert (status, responses, key, events) == before


def _retry_succeeds(stubs: Stubs, execution_id: str, round_id: str, key: str) -> None:
    stubs.respond(round_id, key)
    stubs.respond(round_id, key)  # an idempotent repeat, as a retrying client sends it
    result = stubs.result(execution_id)
    assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result


def test_a_refused_commit_is_unavailable_and_retryable(tmp_path: Path) -> None:
    with _sqlite_service(tmp_path) as (server, stubs, database):
        execution_id, round_id = _paused(stubs)
        before = _round_row(database, round_id)
        # Every round transition appends an event in its transaction: make that fail.
        with contextlib.closing(sqlite3.connect(database, timeout=30)) as conn:
            conn.execute(
                "CREATE TRIGGER m3_fault BEFORE INSERT ON m3_events "
                "BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
            )
            conn.commit()
        try:
            with pytest.raises(grpc.RpcError) as refused:
                stubs.respond(round_id, "key-1")
            _assert_unavailable(refused.value)
            _assert_untouched(database, round_id, before)
            # Reads still work and still show the round pending.
            assert stubs.wait_pending(execution_id).round_id == round_id
        finally:
            with contextlib.closing(sqlite3.connect(database, timeout=30)) as conn:
                conn.execute("DROP TRIGGER m3_fault")
                conn.commit()
        _retry_succeeds(stubs, execution_id, round_id, "key-1")
        assert server.process is not None and server.process.poll() is None


def test_database_locked_past_the_busy_timeout_is_aborted(tmp_path: Path) -> None:
    with _sqlite_service(tmp_path) as (_server, stubs, database):
        execution_id, round_id = _paused(stubs)
        before = _round_row(database, round_id)
        holder = sqlite3.connect(database, timeout=30, isolation_level=None)
        try:
            # Longer than the service's busy timeout (5 s): until the Respond fails.
            holder.execute("BEGIN EXCLUSIVE")
            refused = expect_failure(
                stubs.elicitation.Respond,
                respond_request(round_id, "key-1"),
                timeout=60,
            )
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert refused.code == grpc.StatusCode.ABORTED, refused.status
        assert refused.info.reason == "MANAGED_INPUT_CONFLICT"
        assert refused.info.metadata["conflict_kind"] == "concurrent_update"
        _assert_untouched(database, round_id, before)
        _retry_succeeds(stubs, execution_id, round_id, "key-1")


def test_a_full_disk_is_unavailable_and_retryable(tmp_path: Path) -> None:
    # The service may write no more file bytes (RLIMIT_FSIZE, set on the running
    # process): every write past the first page of a file fails as on a full
    # disk. Python ignores SIGXFSZ, so the write fails instead of killing it.
    # (The service's own log file is full too: its lines of the outage are lost.)
    with _sqlite_service(tmp_path) as (server, stubs, database):
        execution_id, round_id = _paused(stubs)
        before = _round_row(database, round_id)
        pid = server.pid
        limits = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (4096, limits[1]))
        try:
            with pytest.raises(grpc.RpcError) as refused:
                stubs.respond(round_id, "key-1")
            _assert_unavailable(refused.value)
            # Reads keep working meanwhile.
            assert stubs.wait_pending(execution_id).round_id == round_id
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, limits)
        _assert_untouched(database, round_id, before)
        _retry_succeeds(stubs, execution_id, round_id, "key-1")
        # A new execution runs start to finish on the same service.
        execution_id, round_id = _paused(stubs)
        _retry_succeeds(stubs, execution_id, round_id, "key-2")


# -- PostgreSQL restarted under load ---------------------------------------------------


@contextlib.contextmanager
def _private_postgres() -> Iterator[tuple[str, Path, dict[str, str]]]:
    """A PostgreSQL server of the test's own (it restarts it), via start-postgres.sh."""
    if not os.environ.get("M3_TEST_POSTGRES_URL"):
        pytest.skip("needs PostgreSQL (M3_TEST_POSTGRES_URL; scripts/start-postgres.sh)")
    port = _free_port()
    # Not under tmp_path: the postgres user must be able to reach the directory.
    data = Path(f"/tmp/m3-faults-pg-{port}")
    env = {**os.environ, "M3_PG_PORT": str(port), "M3_PG_DATA": str(data)}
    url = _start_postgres(env)
    try:
        yield url, data, env
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            _pg_ctl(data, "stop", "-m", "immediate", "-w")
        shutil.rmtree(data, ignore_errors=True)


def _start_postgres(env: dict[str, str]) -> str:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "start-postgres.sh")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.strip()


class _Load:
    """Threads calling Submit, GetPending and Respond until stopped; every failure
    is recorded by (status code, ErrorInfo reason)."""

    def __init__(self, stubs: Stubs, rounds: dict[str, str]) -> None:
        self._stubs = stubs
        self._rounds = rounds  # round ID -> execution ID, all paused
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.failures: Counter[tuple[str, str]] = Counter()
        self.successes = 0
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(6)]

    def __enter__(self) -> _Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _run(self, number: int) -> None:
        chooser = random.Random(number)
        round_ids = sorted(self._rounds)
        while not self._stop.is_set():
            kind = chooser.choice(("submit", "pending", "respond", "respond"))
            round_id = chooser.choice(round_ids)
            try:
                if kind == "submit":
                    # Few distinct request IDs: repeats are idempotent, so the load adds
                    # at most three executions (each starts an MCP server process).
                    self._stubs.submit_managed(request_id=f"load-{chooser.randrange(3)}")
                elif kind == "pending":
                    self._stubs.elicitation.GetPending(
                        elicitation_service_pb2.GetPendingRequest(
                            execution_id=self._rounds[round_id]
                        ),
                        timeout=30,
                    )
                else:
                    # Respond only during the outage's load; a success answers the round,
                    # and later repeats of the same key are idempotent.
                    self._stubs.respond(round_id, f"key-{round_id}")
                with self._lock:
                    self.successes += 1
            except grpc.RpcError as error:
                typed = failure(error)  # asserts one m3grpc.dev ErrorInfo
                with self._lock:
                    self.failures[(typed.code.name, typed.info.reason)] += 1


@pytest.mark.postgres
def test_postgres_restarted_under_load(tmp_path: Path) -> None:
    with _private_postgres() as (url, data, env):
        config = _fast_checks(write_config(tmp_path / "m3.toml", url, pool_size=8))
        server = ServerProcess(config, tmp_path / "server.log").start()
        stubs = server.stubs()
        try:
            paused = [_paused(stubs) for _ in range(6)]
            rounds = {round_id: execution_id for execution_id, round_id in paused}
            with _Load(stubs, rounds) as load:
                _pg_ctl(data, "stop", "-m", "fast", "-w")
                _wait_for(stubs.channel, NOT_SERVING)
                _start_postgres(env)
                _wait_for(stubs.channel, SERVING)
            allowed = {
                ("UNAVAILABLE", STORAGE_UNAVAILABLE),
                ("ABORTED", "MANAGED_INPUT_CONFLICT"),
            }
            assert set(load.failures) <= allowed, load.failures
            assert load.failures[("UNAVAILABLE", STORAGE_UNAVAILABLE)] > 0, load.failures
            # Recovered without a restart: every round answers with its key (a repeat
            # when the load's Respond went through) and every execution succeeds.
            for round_id, execution_id in rounds.items():
                _retry_succeeds(stubs, execution_id, round_id, f"key-{round_id}")
            # Nothing half-written: every answered round has its response, its
            # key and its events; none is still pending.
            engine = sa.create_engine(url)
            try:
                with engine.connect() as conn:
                    rows = conn.execute(
                        sa.text(
                            "SELECT r.round_id, r.status, r.idempotency_key, "
                            "(SELECT count(*) FROM m3_events e WHERE e.round_id = r.round_id) "
                            "FROM m3_managed_input_rounds r"
                        )
                    ).all()
            finally:
                engine.dispose()
            for round_id, status, key, events in rows:
                if round_id in rounds:
                    assert status == "resolved", (round_id, status)
                    assert key == f"key-{round_id}"
                    assert events >= 2, (round_id, events)
            log = (tmp_path / "server.log").read_text()
            assert "the worker pool is not running" not in log
            assert "unexpected error" not in log
        finally:
            stubs.close()
            server.stop()
