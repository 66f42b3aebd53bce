"""Latency and throughput of `m3grpc serve` over loopback gRPC: cheap unary calls and the
managed round trip (Submit -> pending round -> Respond -> Result).

Starts `python -m m3grpc.cli serve --listen 127.0.0.1:0` as a subprocess (SQLite in a
temporary directory, one stdio binding `shipping` = tests/mcp_servers/shipping.py
--variant legacy, worker pool of --pool-size, default poll intervals), then measures
through the generated stubs:

  (i)   unary latency of Snapshot (an existing execution) and GetPending (nothing
        pending): --calls calls from --concurrency threads on one channel; p50/p95/p99
        and calls/s; the same two calls through the remote client (RemoteMCPTestKit),
        reported separately;
  (ii)  the managed round trip: --executions executions, at most --in-flight at once:
        Submit (scripted AgentSpec, tool shipping:book_shipment, MANAGED) -> time until
        GetPending shows the round (polled every --poll-ms; includes spawning the stdio
        MCP server) -> Respond latency -> "answer-to-finish": from the Respond
        acknowledgement until Result returns SUCCEEDED; executions/s overall; then,
        untimed, a breakdown from the server's own timestamps (GetRound, Snapshot) and
        the CPU time the service and its stdio MCP servers used (Linux /proc);
  (iii) answer-to-finish seen through WatchPending, one execution and one stream at a
        time (--watch-executions), next to Result called at the same moment.

Every phase is bounded in count and by --phase-timeout seconds; the server is stopped
(SIGTERM, then SIGKILL of its process group) however the run ends. Nothing is asserted.

    python bench/grpc_managed_rounds.py [--executions 40] [--in-flight 8] [--calls 1000]
        [--concurrency 4] [--pool-size 8] [--watch-executions 5] [--poll-ms 50]
        [--phase-timeout 120] [--mcp-python PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import grpc  # noqa: E402
from compare_common import abort_on_signals  # noqa: E402

from m3grpc.devtools.serve_process import ServeProcess  # noqa: E402
from m3grpc.wire.gen.m3.v1 import (  # noqa: E402
    elicitation_pb2,
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
)

SHIPPING = REPO_ROOT / "tests" / "mcp_servers" / "shipping.py"
ADDRESS = {"street": "1 Main Street", "city": "Pune"}
REQUEST_KEY = "shipping_address"
UNARY_WARMUP = 20
RPC_TIMEOUT = 30.0  # seconds, the cap of any single unary call
SHUTDOWN_GRACE = 5.0  # seconds, the service's shutdown_grace_seconds
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Set when the run is abandoned (SIGTERM, Ctrl-C, an error): every load loop stops.
ABORT = threading.Event()


# -- the server subprocess ------------------------------------------------------------------


def write_config(directory: Path, pool_size: int, mcp_python: str) -> Path:
    path = directory / "m3.toml"
    lines = [
        f"database = {json.dumps(str(directory / 'm3.sqlite'))}",
        f"shutdown_grace_seconds = {SHUTDOWN_GRACE}",
        "[workers]",
        f"pool_size = {pool_size}",
        "[servers.shipping]",
        f"command = {json.dumps(mcp_python)}",
        f"args = {json.dumps([str(SHIPPING), '--variant', 'legacy'])}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


class Server(ServeProcess):
    """`python -m m3grpc.cli serve` in its own process group; always stopped by `stop`."""

    def __init__(self, config: Path, log: Path) -> None:
        # Its stdio MCP servers share its process group, killed with it.
        super().__init__(config, log=log, new_session=True)

    def cpu_seconds(self) -> tuple[float, float] | None:
        """(service process, its reaped children) user+system CPU seconds, from /proc."""
        if self.process is None:
            return None
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        # Fields after the ")": state is [0]; utime, stime, cutime, cstime are [11:15].
        utime, stime, cutime, cstime = (int(v) / TICKS for v in fields[11:15])
        return utime + stime, cutime + cstime


# -- helpers ----------------------------------------------------------------------------------


class Stubs:
    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.executions = execution_service_pb2_grpc.ExecutionServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.elicitation = elicitation_service_pb2_grpc.ElicitationServiceStub(self.channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self.channel.close()


class PhaseTimeout(Exception):
    pass


@dataclass
class Deadline:
    at: float  # time.monotonic()

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        if ABORT.is_set():
            raise PhaseTimeout("the run was abandoned")
        left = self.at - time.monotonic()
        if left <= 0:
            raise PhaseTimeout("the phase ran out of time")
        return left

    def rpc(self, cap: float = RPC_TIMEOUT) -> float:
        return min(cap, self.remaining())


def describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError) and isinstance(exc, grpc.Call):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks; `values` need not be sorted."""
    data = sorted(values)
    if not data:
        return float("nan")
    position = (len(data) - 1) * q
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def submit_request(request_id: str) -> execution_service_pb2.SubmitRequest:
    spec = execution_pb2.AgentSpec(
        harness="scripted",
        server="shipping",
        tools=["shipping:book_shipment"],
        prompt="Ask for the delivery address, then book the shipment.",
    )
    return execution_service_pb2.SubmitRequest(
        agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED, request_id=request_id
    )


def respond_request(round_id: str) -> elicitation_service_pb2.RespondRequest:
    answer = elicitation_pb2.ElicitationResponse(action=elicitation_pb2.ELICITATION_ACTION_ACCEPT)
    answer.content.update(ADDRESS)
    return elicitation_service_pb2.RespondRequest(
        round_id=round_id, responses={REQUEST_KEY: answer}, idempotency_key=f"answer-{round_id}"
    )


def result_request(execution_id: str, seconds: float) -> execution_service_pb2.ResultRequest:
    request = execution_service_pb2.ResultRequest(execution_id=execution_id)
    request.timeout.FromMilliseconds(int(seconds * 1000))
    return request


def ts(timestamp: Any) -> float | None:
    """A google.protobuf.Timestamp as epoch seconds; None when unset."""
    if timestamp.seconds == 0 and timestamp.nanos == 0:
        return None
    return float(timestamp.seconds) + float(timestamp.nanos) / 1e9


# -- results --------------------------------------------------------------------------------


@dataclass
class Row:
    phase: str
    measurement: str
    client: str
    n: int
    concurrency: int
    p50_ms: float
    p95_ms: float
    p99_ms: float | None = None
    per_second: float | None = None  # calls/s or executions/s
    unit: str = ""

    @classmethod
    def of(
        cls,
        phase: str,
        measurement: str,
        client: str,
        concurrency: int,
        seconds: list[float],
        *,
        p99: bool = False,
        per_second: float | None = None,
        unit: str = "",
    ) -> Row:
        ms = [s * 1000 for s in seconds]
        return cls(
            phase=phase,
            measurement=measurement,
            client=client,
            n=len(ms),
            concurrency=concurrency,
            p50_ms=percentile(ms, 0.50),
            p95_ms=percentile(ms, 0.95),
            p99_ms=percentile(ms, 0.99) if p99 else None,
            per_second=per_second,
            unit=unit,
        )


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    breakdown: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


# -- (i) unary latency --------------------------------------------------------------------------


def timed_calls(
    call: Callable[[], Any], calls: int, concurrency: int, deadline: Deadline
) -> tuple[list[float], float]:
    """`calls` calls of `call` from `concurrency` threads: (latencies, wall seconds)."""
    for _ in range(UNARY_WARMUP):
        call()
    latencies: list[float] = []
    lock = threading.Lock()
    issued = [0]

    def worker() -> None:
        mine: list[float] = []
        while time.monotonic() < deadline.at and not ABORT.is_set():
            with lock:
                if issued[0] >= calls:
                    break
                issued[0] += 1
            start = time.perf_counter()
            try:
                call()
            except Exception:
                if ABORT.is_set():
                    break  # the channel was closed under us
                raise
            mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(deadline.at - time.monotonic(), 0) + RPC_TIMEOUT)
    return latencies, time.perf_counter() - start


def bench_unary(
    stubs: Stubs, address: str, execution_id: str, args: argparse.Namespace, report: Report
) -> None:
    from m3grpc.client import RemoteMCPTestKit

    snapshot = execution_service_pb2.SnapshotRequest(execution_id=execution_id)
    get_pending = elicitation_service_pb2.GetPendingRequest(execution_id=execution_id)
    with RemoteMCPTestKit(address) as kit:
        handle = kit.handle(execution_id)
        cases: list[tuple[str, str, Callable[[], Any]]] = [
            ("Snapshot", "stubs", lambda: stubs.executions.Snapshot(snapshot, timeout=RPC_TIMEOUT)),
            (
                "GetPending (none pending)",
                "stubs",
                lambda: stubs.elicitation.GetPending(get_pending, timeout=RPC_TIMEOUT),
            ),
            ("Snapshot", "remote", handle.snapshot),
            ("GetPending (none pending)", "remote", handle.pending_elicitation),
        ]
        for name, client, call in cases:
            deadline = Deadline.after(args.phase_timeout)
            latencies, wall = timed_calls(call, args.calls, args.concurrency, deadline)
            if len(latencies) < args.calls:
                report.failures.append(f"{name} ({client}): {len(latencies)}/{args.calls} in time")
            report.rows.append(
                Row.of(
                    "unary",
                    name,
                    client,
                    args.concurrency,
                    latencies,
                    p99=True,
                    per_second=len(latencies) / wall if wall > 0 else None,
                    unit="calls/s",
                )
            )


# -- (ii) the managed round trip ------------------------------------------------------------


@dataclass
class Trip:
    execution_id: str = ""
    round_id: str = ""
    submit: float = 0.0  # durations (perf_counter), in seconds
    to_pending: float = 0.0
    respond: float = 0.0
    answer_to_finish: float = 0.0
    total: float = 0.0
    pending_seen_wall: float = 0.0  # wall clock (time.time()), to compare with the server's
    result_wall: float = 0.0
    polls: int = 0
    outcome: str = ""


def round_trip(stubs: Stubs, index: int, poll: float, deadline: Deadline, run_id: str) -> Trip:
    trip = Trip()
    start = time.perf_counter()
    submitted = stubs.executions.Submit(submit_request(f"{run_id}-{index}"), timeout=deadline.rpc())
    trip.submit = time.perf_counter() - start
    trip.execution_id = submitted.execution_id
    request = elicitation_service_pb2.GetPendingRequest(execution_id=trip.execution_id)
    while True:
        trip.polls += 1
        response = stubs.elicitation.GetPending(request, timeout=deadline.rpc())
        if response.HasField("round"):
            break
        time.sleep(min(poll, deadline.remaining()))
    trip.to_pending = time.perf_counter() - start
    trip.pending_seen_wall = time.time()
    trip.round_id = response.round.round_id

    sent = time.perf_counter()
    stubs.elicitation.Respond(respond_request(trip.round_id), timeout=deadline.rpc())
    acknowledged = time.perf_counter()
    trip.respond = acknowledged - sent

    wait = deadline.rpc(cap=deadline.remaining())
    result = stubs.executions.Result(
        result_request(trip.execution_id, max(wait - 1.0, 0.1)), timeout=wait
    ).result
    finished = time.perf_counter()
    trip.result_wall = time.time()
    trip.answer_to_finish = finished - acknowledged
    trip.total = finished - start
    trip.outcome = execution_pb2.ExecutionOutcome.Name(result.outcome)
    return trip


def run_trips(
    stubs: Stubs, count: int, in_flight: int, poll: float, timeout: float, report: Report
) -> tuple[list[Trip], float]:
    run_id = f"bench-{os.getpid()}-{time.time_ns()}"
    deadline = Deadline.after(timeout)
    trips: list[Trip] = []
    start = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="trip")
    try:
        futures = [pool.submit(round_trip, stubs, i, poll, deadline, run_id) for i in range(count)]
        for future in futures:
            try:
                trips.append(future.result(timeout=max(deadline.at - time.monotonic(), 0) + 35))
            except Exception as exc:  # a measurement records failures, it does not raise
                report.failures.append(f"round trip: {describe(exc)}")
    except BaseException:
        # Abandoned: queued trips never start; running ones end when the caller closes
        # the channel (their calls fail at once) or at their next deadline check.
        ABORT.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return trips, time.perf_counter() - start


def server_breakdown(stubs: Stubs, trips: list[Trip], deadline: Deadline) -> dict[str, list[float]]:
    """Per-execution segments from the server's timestamps (and the client's wall clock)."""
    segments: dict[str, list[float]] = {}

    def add(name: str, start: float | None, end: float | None) -> None:
        if start is not None and end is not None:
            segments.setdefault(name, []).append(end - start)

    for trip in trips:
        state = stubs.executions.Snapshot(
            execution_service_pb2.SnapshotRequest(execution_id=trip.execution_id),
            timeout=deadline.rpc(),
        ).state
        rnd = stubs.elicitation.GetRound(
            elicitation_service_pb2.GetRoundRequest(round_id=trip.round_id),
            timeout=deadline.rpc(),
        ).round
        created, finished = ts(state.create_time), ts(state.finish_time)
        pending, validated = ts(rnd.create_time), ts(rnd.response_validate_time)
        delivering, delivered = ts(rnd.delivery_start_time), ts(rnd.deliver_time)
        resolved = ts(rnd.resolve_time)
        add("Submit stored -> round stored (claim, spawn, MCP call)", created, pending)
        add("round stored -> GetPending sees it (client poll)", pending, trip.pending_seen_wall)
        add("response stored -> delivery started (worker wakes)", validated, delivering)
        add("delivery started -> delivered (MCP answer, tool done)", delivering, delivered)
        add("delivered -> resolved", delivered, resolved)
        add("resolved -> execution finished (MCP close, finish)", resolved, finished)
        add("execution finished -> Result returned", finished, trip.result_wall)
    return segments


def bench_trips(stubs: Stubs, server: Server, args: argparse.Namespace, report: Report) -> None:
    cpu_before = server.cpu_seconds()
    client_before = time.process_time()
    trips, wall = run_trips(
        stubs, args.executions, args.in_flight, args.poll_ms / 1000, args.phase_timeout, report
    )
    cpu_after = server.cpu_seconds()
    client_cpu = time.process_time() - client_before
    succeeded = [t for t in trips if t.outcome == "EXECUTION_OUTCOME_SUCCEEDED"]
    if len(succeeded) < len(trips):
        report.failures.append(f"{len(trips) - len(succeeded)} executions did not succeed")
    p = args.in_flight
    report.rows += [
        Row.of("managed", "Submit", "stubs", p, [t.submit for t in trips]),
        Row.of(
            "managed",
            "Submit -> round pending (GetPending)",
            "stubs",
            p,
            [t.to_pending for t in trips],
        ),
        Row.of("managed", "Respond", "stubs", p, [t.respond for t in trips]),
        Row.of(
            "managed", "answer-to-finish (Result)", "stubs", p, [t.answer_to_finish for t in trips]
        ),
        Row.of(
            "managed",
            "whole execution (Submit -> Result)",
            "stubs",
            p,
            [t.total for t in trips],
            per_second=len(succeeded) / wall if wall > 0 else None,
            unit="executions/s",
        ),
    ]
    polls = [t.polls for t in trips]
    if polls:
        report.notes.append(
            f"managed: {len(succeeded)}/{args.executions} succeeded in {wall:.2f} s; "
            f"GetPending polled every {args.poll_ms:g} ms, {percentile(polls, 0.5):.0f} polls "
            f"per execution (p50)"
        )
    if cpu_before is not None and cpu_after is not None and trips:
        service = cpu_after[0] - cpu_before[0]
        children = cpu_after[1] - cpu_before[1]
        report.notes.append(
            f"managed: CPU per execution: service {service / len(trips) * 1000:.0f} ms, "
            f"its stdio MCP servers {children / len(trips) * 1000:.0f} ms, "
            f"this client {client_cpu / len(trips) * 1000:.0f} ms "
            f"({service + children + client_cpu:.1f} CPU-s in {wall:.1f} s wall "
            f"on {os.cpu_count()} CPUs)"
        )
    if succeeded:
        deadline = Deadline.after(args.phase_timeout)
        for name, seconds in server_breakdown(stubs, succeeded, deadline).items():
            report.breakdown.append(Row.of("managed", name, "server clock", p, seconds))


# -- (iii) WatchPending -----------------------------------------------------------------------


def watch_trip(stubs: Stubs, index: int, deadline: Deadline, run_id: str) -> dict[str, float]:
    start = time.perf_counter()
    submitted = stubs.executions.Submit(
        submit_request(f"{run_id}-watch-{index}"), timeout=deadline.rpc()
    )
    execution_id = submitted.execution_id
    stream = stubs.executions.WatchPending(
        execution_service_pb2.WatchPendingRequest(execution_id=execution_id),
        timeout=deadline.remaining(),
    )
    times: dict[str, float] = {}
    result_done: dict[str, float] = {}

    def wait_result(acknowledged: float) -> None:
        wait = deadline.rpc(cap=deadline.remaining())
        stubs.executions.Result(result_request(execution_id, max(wait - 1.0, 0.1)), timeout=wait)
        result_done["answer-to-finish (Result)"] = time.perf_counter() - acknowledged

    waiter: threading.Thread | None = None
    acknowledged = 0.0
    try:
        events: Iterator[Any] = iter(stream)
        for event in events:
            kind = event.WhichOneof("event")
            if kind == "round_pending" and not acknowledged:
                times["Submit -> round pending (WatchPending)"] = time.perf_counter() - start
                request = respond_request(event.round_pending.round_id)
                sent = time.perf_counter()
                stubs.elicitation.Respond(request, timeout=deadline.rpc())
                acknowledged = time.perf_counter()
                times["Respond"] = acknowledged - sent
                waiter = threading.Thread(target=wait_result, args=(acknowledged,), daemon=True)
                waiter.start()
            elif kind == "round_left_pending" and acknowledged:
                times["answer -> round_left_pending (WatchPending)"] = (
                    time.perf_counter() - acknowledged
                )
            elif kind == "execution_finished" and acknowledged:
                times["answer-to-finish (WatchPending)"] = time.perf_counter() - acknowledged
                break
    finally:
        stream.cancel()
    if waiter is not None:
        waiter.join(timeout=max(deadline.at - time.monotonic(), 0) + RPC_TIMEOUT)
    times.update(result_done)
    return times


def bench_watch(stubs: Stubs, args: argparse.Namespace, report: Report) -> None:
    run_id = f"bench-{os.getpid()}-{time.time_ns()}"
    deadline = Deadline.after(args.phase_timeout)
    collected: dict[str, list[float]] = {}
    for index in range(args.watch_executions):
        try:
            for name, seconds in watch_trip(stubs, index, deadline, run_id).items():
                collected.setdefault(name, []).append(seconds)
        except Exception as exc:
            report.failures.append(f"watch: {describe(exc)}")
            if isinstance(exc, PhaseTimeout):
                break
    order = [
        "Submit -> round pending (WatchPending)",
        "Respond",
        "answer -> round_left_pending (WatchPending)",
        "answer-to-finish (WatchPending)",
        "answer-to-finish (Result)",
    ]
    for name in order:
        if name in collected:
            report.rows.append(Row.of("watch", name, "stubs", 1, collected[name]))


# -- driver -----------------------------------------------------------------------------------


def warm_up(stubs: Stubs, deadline: Deadline) -> str:
    """One untimed managed execution (first spawn, imports, caches); returns its ID."""
    trip = round_trip(stubs, 0, 0.05, deadline, f"bench-warmup-{os.getpid()}-{time.time_ns()}")
    if trip.outcome != "EXECUTION_OUTCOME_SUCCEEDED":
        raise RuntimeError(f"the warm-up execution ended {trip.outcome}")
    return trip.execution_id


def run(args: argparse.Namespace, directory: Path, report: Report) -> dict[str, Any]:
    server = Server(write_config(directory, args.pool_size, args.mcp_python), directory / "log")
    info: dict[str, Any] = {}
    try:
        server.start(timeout=args.phase_timeout)
        info["address"] = server.address
        stubs = Stubs(server.address)
        try:
            execution_id = warm_up(stubs, Deadline.after(args.phase_timeout))
            if args.calls > 0:
                bench_unary(stubs, server.address, execution_id, args, report)
            if args.executions > 0:
                bench_trips(stubs, server, args, report)
            if args.watch_executions > 0:
                bench_watch(stubs, args, report)
        finally:
            stubs.close()
    except Exception as exc:
        report.failures.append(describe(exc))
        report.failures.append(f"server log tail:\n{server.log_tail()}")
    finally:
        ABORT.set()  # stops any load loop still running (after an interruption)
        server.stop(grace=SHUTDOWN_GRACE + 20)  # SIGTERM; then SIGKILL of its group
        info["server_exit_code"] = server.exit_code
        info["server_killed"] = server.killed
    return info


def table(rows: list[Row]) -> str:
    header = (
        f"{'phase':<8} {'measurement':<45} {'client':<7} {'n':>5} {'conc':>4} "
        f"{'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'per s':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        p99 = f"{r.p99_ms:8.2f}" if r.p99_ms is not None else f"{'-':>8}"
        rate = f"{r.per_second:8.1f}" if r.per_second is not None else f"{'-':>8}"
        lines.append(
            f"{r.phase:<8} {r.measurement:<45} {r.client:<7} {r.n:>5} {r.concurrency:>4} "
            f"{r.p50_ms:8.2f} {r.p95_ms:8.2f} {p99} {rate}"
        )
    return "\n".join(lines)


def breakdown_table(rows: list[Row]) -> str:
    header = f"{'segment of one execution (server timestamps)':<56} {'p50 ms':>8} {'p95 ms':>8}"
    lines = [header, "-" * len(header)]
    lines += [f"{r.measurement:<56} {r.p50_ms:8.1f} {r.p95_ms:8.1f}" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=40, help="managed round trips (40)")
    parser.add_argument("--in-flight", type=int, default=8, help="round trips at once (8)")
    parser.add_argument("--calls", type=int, default=1000, help="calls per unary case (1000)")
    parser.add_argument("--concurrency", type=int, default=4, help="unary caller threads (4)")
    parser.add_argument("--pool-size", type=int, default=8, help="service worker pool size (8)")
    parser.add_argument(
        "--watch-executions", type=int, default=5, help="executions watched one at a time (5)"
    )
    parser.add_argument(
        "--poll-ms", type=float, default=50.0, help="GetPending poll interval, ms (50)"
    )
    parser.add_argument(
        "--phase-timeout", type=float, default=120.0, help="bound of every phase, s (120)"
    )
    parser.add_argument(
        "--mcp-python",
        default=sys.executable,
        help="interpreter of the stdio MCP server (default: this one; e.g. python3)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    for name in ("in_flight", "concurrency", "pool_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("executions", "calls", "watch_executions"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative")
    if args.poll_ms <= 0 or args.phase_timeout <= 0:
        parser.error("--poll-ms and --phase-timeout must be positive")

    # SIGTERM to the benchmark still runs the finally blocks (and stops the server).
    abort_on_signals(ABORT)
    directory = Path(tempfile.mkdtemp(prefix="m3-grpc-bench-"))
    report = Report()
    try:
        info = run(args, directory, report)
    except BaseException:
        print("interrupted; the server was stopped", file=sys.stderr)
        raise
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    environment: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "grpcio": grpc.__version__,
        "platform": platform.platform(),
        "pool_size": args.pool_size,
        "in_flight": args.in_flight,
        "poll_interval_seconds": "default (0.5)",
        "watch_poll_interval_seconds": "default (0.15)",
        "mcp_python": args.mcp_python,
        **info,
    }
    if args.json:
        document = {
            "environment": environment,
            "results": [asdict(r) for r in report.rows],
            "breakdown": [asdict(r) for r in report.breakdown],
            "notes": report.notes,
            "failures": report.failures,
        }
        print(json.dumps(document, indent=2))
    else:
        print(
            f"nproc {environment['nproc']}, Python {environment['python']}, "
            f"SQLite {environment['sqlite']}, grpcio {environment['grpcio']}, "
            f"{environment['platform']}"
        )
        print(
            f"service: pool_size {args.pool_size}, default poll intervals (worker 0.5 s, "
            f"watch 0.15 s), SQLite in a temporary directory; stdio MCP server "
            f"{args.mcp_python} tests/mcp_servers/shipping.py --variant legacy"
        )
        print(table(report.rows))
        if report.breakdown:
            print()
            print(breakdown_table(report.breakdown))
        for note in report.notes:
            print(note)
        print(
            f"server stopped: exit code {info.get('server_exit_code')}"
            + (" (killed after SIGTERM timed out)" if info.get("server_killed") else "")
        )
        for failure in report.failures:
            print(f"FAILED: {failure}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
