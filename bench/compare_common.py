"""Pieces shared by bench/compare.py, its worker processes and bench/grpc_managed_rounds.py
(standard library only).

The workers run in two interpreters: the project's (M3) and bench/.venv-bench (LangGraph,
DBOS), so nothing here imports the project or a peer.

Worker protocol: a worker prints one JSON line `{"ready": {...}}` when it is set up, then
reads one JSON command per line on stdin and answers each with one JSON line; it writes
those lines to the stdout it was started with, and points `sys.stdout` at stderr so that
no library chatter can corrupt the protocol.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any

# What every system is asked, and what it answers.
QUESTION = "Where should the shipment go?"
ANSWER = {"street": "1 Main Street", "city": "Pune"}
REQUEST_KEY = "shipping_address"
RESUMED_MARK = "resumed_ns="
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def after_pause(answer: Mapping[str, Any]) -> tuple[str, int]:
    """The work after the pause, the same in every system: note when it ran, book.

    Returns the result text (which carries the monotonic timestamp) and the timestamp.
    CLOCK_MONOTONIC is one clock for every process of the machine, so the MCP server's
    timestamp compares with the driver's.
    """
    resumed_ns = time.monotonic_ns()
    text = f"booked shipment to {answer['street']}, {answer['city']} {RESUMED_MARK}{resumed_ns}"
    return text, resumed_ns


def resumed_ns_in(text: str) -> int | None:
    """The timestamp `after_pause` put into a result text (anywhere inside it)."""
    at = text.find(RESUMED_MARK)
    if at < 0:
        return None
    digits = ""
    for char in text[at + len(RESUMED_MARK) :]:
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b of two figures, None when either is missing (or b is 0)."""
    return None if a is None or b is None or b == 0 else a / b


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks; None without values."""
    data = sorted(values)
    if not data:
        return None
    position = (len(data) - 1) * q
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def abort_on_signals(abort: threading.Event) -> None:
    """SIGTERM / Ctrl-C set `abort` and raise SystemExit in the main thread, so the
    finally blocks still run (and stop what was started); a second signal does not
    interrupt that cleanup."""

    def terminate(signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        abort.set()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)


def process_cpu_seconds(pid: int) -> float | None:
    """user + system CPU seconds of a live process (Linux /proc), children excluded."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    except OSError:
        return None
    # Fields after the ")": state is [0]; utime, stime are [11], [12].
    return (int(fields[11]) + int(fields[12])) / TICKS


def process_rss_bytes(pid: int) -> int | None:
    """Resident set size of a live process (VmRSS), in bytes."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def wait_until_serving(url: str, gone: Callable[[], str | None], *, timeout: float = 60.0) -> None:
    """Return once `url` gives any HTTP answer; raise when `gone()` names why the
    server will never answer (it exited, the run was aborted) or after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        reason = gone()
        if reason is not None:
            raise RuntimeError(reason)
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # any HTTP answer means it is serving
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not come up within {timeout:.0f} s") from None
            time.sleep(0.1)


def own_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def read_pragmas(connection: sqlite3.Connection) -> dict[str, Any]:
    """The durability settings of one open SQLite connection, read back from it."""
    journal = connection.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = connection.execute("PRAGMA synchronous").fetchone()[0]
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return {
        "journal_mode": str(journal).upper(),
        "synchronous": names.get(synchronous, synchronous),
    }


class PragmaProbe:
    """Reads the pragmas of every SQLite connection any SQLAlchemy pool in this process
    hands out (once per connection, at its first checkout, after the owner's own
    `connect` listeners ran): what the system under test really uses."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path  # also written there as JSON (for a process we cannot ask)
        self.seen: dict[str, dict[str, list[Any]]] = {}
        self._lock = threading.Lock()

    def install(self) -> None:
        from sqlalchemy import event
        from sqlalchemy.pool import Pool

        event.listen(Pool, "checkout", self._on_checkout)

    def _on_checkout(self, dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if record.info.get("m3_bench_probed") or not isinstance(
            dbapi_connection, sqlite3.Connection
        ):
            return
        record.info["m3_bench_probed"] = True
        files = dbapi_connection.execute("PRAGMA database_list").fetchall()
        database = next((row[2] for row in files if row[1] == "main"), "?")
        self.note(os.path.basename(database) or "?", read_pragmas(dbapi_connection))

    def note(self, database: str, pragmas: Mapping[str, Any]) -> None:
        with self._lock:
            entry = self.seen.setdefault(database, {"connections": [0]})
            entry["connections"][0] += 1
            for key, value in pragmas.items():
                values = entry.setdefault(key, [])
                if value not in values:
                    values.append(value)
            if self.path is not None:
                with open(self.path + ".tmp", "w") as out:
                    json.dump(self.seen, out)
                os.replace(self.path + ".tmp", self.path)

    def summary(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {
                database: {
                    "connections": entry["connections"][0],
                    **{k: v for k, v in entry.items() if k != "connections"},
                }
                for database, entry in self.seen.items()
            }


class Protocol:
    """The worker side of the JSON-lines protocol (see the module docstring)."""

    def __init__(self) -> None:
        self._out: IO[str] = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        sys.stdout = sys.stderr

    def send(self, document: Mapping[str, Any]) -> None:
        self._out.write(json.dumps(document) + "\n")
        self._out.flush()

    def serve(self, handle: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Answer commands until `{"op": "quit"}` or end of input."""
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            if command.get("op") == "quit":
                break
            try:
                reply = handle(command)
            except Exception as exc:  # reported to the orchestrator, which records it
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            self.send(reply)


class Tally:
    """What a measurement records until its deadline: each round's two durations
    (answer sent -> resumed, answer sent -> result), failures, wall and CPU seconds.
    Safe to record into from threads."""

    def __init__(self, timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.resume: list[float] = []
        self.result: list[float] = []
        self.failures: list[str] = []
        self.wall = 0.0
        self.cpu = 0.0
        self._lock = threading.Lock()

    def left(self, floor: float = 0.0) -> float:
        """Seconds to the deadline (at least `floor`)."""
        return max(self.deadline - time.monotonic(), floor)

    def answered(self, durations: tuple[float, float]) -> None:
        with self._lock:
            self.resume.append(durations[0])
            self.result.append(durations[1])

    def failed(self, exc: BaseException, step: str | None = None) -> None:
        text = f"{type(exc).__name__}: {exc}"
        cause = exc.__cause__
        while cause is not None and not hasattr(cause, "debug_error_string"):
            cause = cause.__cause__
        if cause is not None:  # a failed gRPC call: what the transport said
            text += f" ({cause.debug_error_string()})"  # type: ignore[attr-defined]
        with self._lock:
            self.failures.append(f"{step}: {text}" if step else text)

    def batches(self, count: int) -> Iterator[int]:
        """Up to `count` batches, fewer (noted as a failure) when the deadline passes."""
        for index in range(count):
            if time.monotonic() >= self.deadline:
                self.failures.append("the phase ran out of time")
                return
            yield index

    @contextlib.contextmanager
    def measured(self, *, wall: bool = True) -> Iterator[None]:
        """Add the block's CPU seconds (and, unless `wall` is False, its wall seconds)."""
        cpu, start = own_cpu_seconds(), time.monotonic()
        try:
            yield
        finally:
            self.cpu += own_cpu_seconds() - cpu
            if wall:
                self.wall += time.monotonic() - start

    def reply(self) -> dict[str, Any]:
        return batch_reply(
            rounds=len(self.result),
            wall=self.wall,
            cpu=self.cpu,
            resume=self.resume,
            result=self.result,
            failures=self.failures,
        )


def batch_reply(
    *,
    rounds: int,
    wall: float,
    cpu: float,
    resume: list[float],
    result: list[float],
    failures: list[str],
) -> dict[str, Any]:
    """A worker's answer to one measurement command (durations in seconds)."""
    return {
        "rounds": rounds,
        "wall": wall,
        "cpu": cpu,
        "resume": resume,
        "result": result,
        "failures": failures[:20],
        "failure_count": len(failures),
    }
