"""`workers.processes = 2`: `m3grpc serve` runs a second, worker-only process on
the same database. Both claim work, and when the second one dies (SIGKILL) with
paused executions, recovery hands its 2026-07-28 rounds to the service's own
workers: every execution still finishes once, answered. The two wake each other
(m3grpc/runtime/local_wakes.py): with polling all but off, a Submit reaches the
worker process, its pending round reaches a WatchPending stream on the service,
the service's Respond resumes it and its finish ends a Result wait, each within
a bound far below any polling interval (a bound on a wait, not a timing).
Black-box; every wait is a bounded loop, nothing asserts on elapsed time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from pathlib import Path

import grpc
import pytest

from m3grpc.devtools.serve_process import ServeProcess
from m3grpc.ops.health import check_health
from m3grpc.wire.gen.m3.v1 import execution_pb2, execution_service_pb2

from .conftest import ServerProcess, Stubs
from .test_round_resume import assert_resumed_once, resume_config, submit_ledger

EXECUTIONS = 6


def worker_children(service: ServeProcess) -> list[int]:
    """PIDs of the service's worker processes (its children running the module).

    Found by each process's parent in /proc/PID/stat: /proc/PID/task/TID/children,
    read before, "is reliable only if all of the child processes are stopped or
    frozen" (proc(5)), and once came back empty in a CI run of this file (whether
    the worker process was gone then is not known)."""
    assert service.process is not None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if parent_of(int(entry.name)) != service.process.pid:
                continue
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited while we looked
        if b"m3grpc.api.worker_processes" in cmdline:
            found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def answered_where(ledger: Path) -> tuple[str, str]:
    """(PID of the MCP server process that asked, PID of the one the answer reached)."""
    lines = ledger.read_text().splitlines()
    assert len(lines) == 3 and lines[0].startswith("reserved crate"), lines
    booked = lines[2]
    asked = booked.split(" asked_by=")[1].split(" ")[0]
    return asked, booked.split(" answered_in=")[1]


def wait_until_open(pid: int, database: Path) -> None:
    """Wait (bounded) until process `pid` has `database` open: its runtime has
    started and claims work. A loaded machine may take seconds to import it, and
    the service alone could otherwise run every execution before it is up."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        fds = Path(f"/proc/{pid}/fd")
        try:
            if any(Path(os.readlink(fd)) == database for fd in fds.iterdir()):
                return
        except FileNotFoundError:
            pass  # a descriptor closed while we looked
        time.sleep(0.1)
    raise AssertionError(f"worker process {pid} never opened {database}")


def round_owners(database: Path) -> dict[str, str]:
    """round_id -> the worker that owns it, read from the database."""
    with sqlite3.connect(database) as conn:
        rows = conn.execute("SELECT round_id, owner_id FROM m3_managed_input_rounds").fetchall()
    return {round_id: owner for round_id, owner in rows}


def test_two_processes_share_work_and_recover_a_dead_ones(tmp_path: Path) -> None:
    database = tmp_path / "m3.sqlite"
    # Not parked while they wait (park_after_seconds): each process holds its own.
    config = resume_config(tmp_path, database, pool_size=1, processes=2, park_after=86_400.0)
    service = ServerProcess(config, tmp_path / "server.log").start()
    stubs = service.stubs()
    try:
        children = worker_children(service)
        # (A dead child is a zombie with no command line: the log says why.)
        assert len(children) == 1, (children, service.log_tail())
        wait_until_open(children[0], database)
        ledgers = [tmp_path / f"ledger-{i}.txt" for i in range(EXECUTIONS)]
        executions = [submit_ledger(stubs, ledger) for ledger in ledgers]
        rounds = [str(stubs.wait_pending(e).round_id) for e in executions]
        owners = round_owners(database)
        # One slot per process and six executions: both processes ran some.
        assert len({owners[r] for r in rounds}) == 2, owners

        os.kill(children[0], signal.SIGKILL)
        # The dead process's rounds pass on (its lease expires) and are answered
        # like the others: every execution succeeds, each operation ran once.
        for round_id in rounds:
            stubs.respond(round_id, f"answer-{round_id}")
        moved: dict[str, set[bool]] = {}
        for execution_id, round_id, ledger in zip(executions, rounds, ledgers, strict=True):
            result = stubs.result(execution_id)
            assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
            asked, answered = answered_where(ledger)
            if asked != answered:
                assert_resumed_once(result, ledger)
            moved.setdefault(owners[round_id], set()).add(asked != answered)
        # The survivor answered its own rounds in the sessions that asked; every
        # round of the dead one was retried in a new session elsewhere.
        assert sorted(moved.values(), key=sorted) == [{False}, {True}], moved
    finally:
        stubs.close()
        assert service.terminate() == 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_process_group_ends_every_process_cleanly(
    tmp_path: Path, signum: int
) -> None:
    """Ctrl-C in a terminal (SIGINT), `timeout` and service managers (SIGTERM) signal the
    whole process group: the worker process gets the signal with the service. Both end
    cleanly; before, the worker aborted at its interpreter's shutdown ("Fatal Python
    error": the thread watching its stdin held the buffered reader's lock)."""
    database = tmp_path / "m3.sqlite"
    config = resume_config(tmp_path, database, pool_size=1, processes=2)
    log = tmp_path / "server.log"
    service = ServeProcess(config, log=log, args=("--log-level", "info"), new_session=True)
    service.start()
    try:
        (child,) = worker_children(service)
        wait_until_open(child, database)
        os.killpg(service.pid, signum)
        assert service.process is not None
        # The service waits for its worker processes before it exits.
        assert service.process.wait(60) == 0, service.log_tail()
        assert not _running(child)
    finally:
        service.stop()
    assert "Fatal Python error" not in log.read_text(), service.log_tail()


def test_sigterm_stops_serving_at_once_while_worker_processes_stop(tmp_path: Path) -> None:
    """SIGTERM turns the service NOT_SERVING (and refuses calls) at once, while its
    worker processes stop in the same grace period. Before, the service served on
    through its worker processes' whole stop, and then took a grace of its own. A
    worker process held stopped (SIGSTOP) makes that stop last (SIGKILL after the
    grace): the service must be out of SERVING while it is still there."""
    database = tmp_path / "m3.sqlite"
    config = resume_config(tmp_path, database, pool_size=1, processes=2, grace=3.0)
    service = ServeProcess(config, log=tmp_path / "server.log")
    service.start()
    try:
        (child,) = worker_children(service)
        wait_until_open(child, database)
        os.kill(child, signal.SIGSTOP)
        assert service.process is not None
        service.process.send_signal(signal.SIGTERM)
        left_serving_while_child_lived = False
        for _ in range(600):  # bounded: the child is SIGKILLed after the grace (+5 s)
            if not _running(child):
                break
            try:
                status = check_health(service.address, timeout=2)
            except grpc.RpcError:
                status = "refused"
            if status != "SERVING" and _running(child):
                left_serving_while_child_lived = True
                break
            time.sleep(0.05)
        assert left_serving_while_child_lived, service.log_tail()
        assert service.process.wait(60) == 0, service.log_tail()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGCONT)
        service.stop()


# Polling all but off: the workers', the waits' and WatchPending's (the runtime's own
# safety re-read of a waiting round or result is SAFETY_REREAD_SECONDS, 30 s).
NO_POLL = 600.0
# Far below both: only a wake-up gets there in time.
BOUND = 20.0
TRIES = 12


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def asked_in(ledger: Path) -> int:
    """The PID of the MCP server process that asked the (pending) round."""
    lines = ledger.read_text().splitlines()
    assert lines[1].startswith("asked pid="), lines
    return int(lines[1].removeprefix("asked pid="))


def pending_rounds(stream: object, execution_ids: list[str]) -> dict[str, str]:
    """execution_id -> round_id of the first round_pending event of each execution."""
    found: dict[str, str] = {}
    for event in stream:  # type: ignore[attr-defined]
        if event.HasField("round_pending"):
            pending = event.round_pending
            if pending.execution_id in execution_ids:
                found.setdefault(str(pending.execution_id), str(pending.round_id))
                if len(found) == len(execution_ids):
                    return found
    raise AssertionError(f"the stream ended before rounds of all of {execution_ids}")


def result_within(stubs: Stubs, execution_id: str) -> execution_pb2.ExecutionResult:
    request = execution_service_pb2.ResultRequest(execution_id=execution_id)
    return stubs.executions.Result(request, timeout=BOUND).result


def test_linked_processes_wake_each_other_without_polling(tmp_path: Path) -> None:
    database = tmp_path / "m3.sqlite"
    config = resume_config(tmp_path, database, pool_size=1, processes=2, poll_interval=NO_POLL)
    service = ServerProcess(config, tmp_path / "server.log").start()
    stubs = service.stubs()
    try:
        (child,) = worker_children(service)
        wait_until_open(child, database)
        # Whichever process claims a Submit first runs it: submit until the worker
        # process runs one (without the wake it claims only at its start and its poll;
        # and with worker processes, the service claims no Submit as it creates it).
        for attempt in range(TRIES):
            # Opened before the Submit, so the round arrives as a live event.
            stream = stubs.executions.WatchPending(
                execution_service_pb2.WatchPendingRequest(), timeout=BOUND
            )
            ledger = tmp_path / f"ledger-{attempt}.txt"
            execution_id = submit_ledger(stubs, ledger)
            round_id = pending_rounds(stream, [execution_id])[execution_id]
            stream.cancel()
            in_child = parent_of(asked_in(ledger)) == child
            stubs.respond(round_id, f"answer-{attempt}")
            result = result_within(stubs, execution_id)
            assert result.outcome == execution_pb2.EXECUTION_OUTCOME_SUCCEEDED, result
            if in_child:
                # The child's round reached the service's stream, the service's
                # Respond resumed it in the child (the same MCP server process
                # got the answer) and its finish ended the service's Result wait.
                asked, answered = answered_where(ledger)
                assert asked == answered, (asked, answered)
                return
        raise AssertionError(f"the worker process ran none of {TRIES} executions")
    except grpc.RpcError as exc:
        raise AssertionError(f"a wait outlasted {BOUND} s: {exc}") from exc
    finally:
        stubs.close()
        assert service.terminate() == 0
