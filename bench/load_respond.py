"""Load campaign: many concurrent Respond calls and WatchPending watchers against one
`m3grpc serve`, for a bounded time. It reports; the only thing it checks is that every
failed call was a typed error.

Starts `python -m m3grpc.cli serve --listen 127.0.0.1:0` (SQLite in a temporary
directory, the stdio binding `shipping` = tests/mcp_servers/shipping.py), pauses
--paused managed executions (each waits for a human on one round) and keeps that many
paused while it runs: a refill loop submits a new execution whenever one is answered.
Then, for --seconds:

- --responders concurrent callers (asyncio tasks on one grpc.aio channel each send
  Respond after Respond), a mix of: valid answers to pending rounds (every caller uses
  the round's one key, so concurrent answers to one round are idempotent repeats),
  duplicates (the same key and content again, after the round was answered),
  conflicts (an answered round, another key: ABORTED or FAILED_PRECONDITION) and
  invalid calls (content of the wrong type: INVALID_ARGUMENT; an unknown round:
  NOT_FOUND);
- --watchers WatchPending streams over every execution.

Reported: every failed call by status code and ErrorInfo reason; Respond latency
p50/p99 (every call, and valid answers alone); watcher event latency p50/p99 (from the
acknowledgement of the Respond that answered a round to each watcher's
round_left_pending event for it; 0 when the event came first); the service's resident
memory (VmRSS, sampled every --sample-seconds): at start, after warm-up (the paused
executions ready and --warmup-seconds of load), peak, end, and whether the end is within
--flat-percent of the warm-up value ("flat").

Exit status 1 when any call failed with INTERNAL or UNKNOWN, or with a status that has
no m3grpc.dev ErrorInfo (other than a call's own DEADLINE_EXCEEDED or our CANCELLED at
the end), or when the run could not be set up; else 0. Loopback only; the service is
stopped (SIGTERM, then SIGKILL of its process group) however the run ends.

    python bench/load_respond.py [--seconds 30] [--responders 500] [--watchers 50]
        [--paused 40] [--pool-size 8] [--json]
    python bench/load_respond.py --smoke      # a few seconds, small counts (scripts/test.sh)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import grpc  # noqa: E402
from compare_common import abort_on_signals  # noqa: E402
from google.rpc import error_details_pb2, status_pb2  # noqa: E402
from grpc_managed_rounds import (  # noqa: E402
    ADDRESS,
    REQUEST_KEY,
    Server,
    percentile,
    submit_request,
    write_config,
)

from m3grpc.wire.gen.m3.v1 import (  # noqa: E402
    elicitation_pb2,
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    execution_service_pb2,
    execution_service_pb2_grpc,
)

RPC_TIMEOUT = 60.0  # seconds, the cap of one unary call
SETUP_TIMEOUT = 180.0  # seconds to pause the first executions
ABORT = threading.Event()
# Failures that say nothing about the service: our own cancellation at the end, and a
# call's own deadline (the client's choice under load).
CLIENT_SIDE = {"CANCELLED", "DEADLINE_EXCEEDED"}


@dataclass
class Tally:
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    ok: Counter[str] = field(default_factory=Counter)
    respond_ms: list[float] = field(default_factory=list)
    valid_ms: list[float] = field(default_factory=list)
    watch_ms: list[float] = field(default_factory=list)
    watch_events: int = 0
    submitted: int = 0

    def fail(self, error: grpc.RpcError, kind: str) -> None:
        self.failures[(_code(error), _reason(error))] += 1
        self.ok[f"{kind}:failed"] += 1


def _code(error: grpc.RpcError) -> str:
    code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def _reason(error: grpc.RpcError) -> str:
    """The m3grpc.dev ErrorInfo reason of a failed call; "" when it has none."""
    trailing = error.trailing_metadata() if isinstance(error, grpc.aio.AioRpcError) else None
    for key, value in trailing or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                if info.domain == "m3grpc.dev":
                    return str(info.reason)
    return ""


class Rounds:
    """Pending rounds (from the feeder stream) and answered ones (with the time the
    answering Respond was acknowledged)."""

    def __init__(self) -> None:
        self.pending: dict[str, str] = {}  # round ID -> execution ID
        self.answered: dict[str, float] = {}  # round ID -> monotonic ack time
        self.changed = asyncio.Event()


def _answer(round_id: str, key: str, content: dict[str, Any]) -> Any:
    response = elicitation_pb2.ElicitationResponse(action=elicitation_pb2.ELICITATION_ACTION_ACCEPT)
    response.content.update(content)
    return elicitation_service_pb2.RespondRequest(
        round_id=round_id, responses={REQUEST_KEY: response}, idempotency_key=key
    )


async def _responder(
    number: int, stub: Any, rounds: Rounds, tally: Tally, stop: asyncio.Event
) -> None:
    chooser = random.Random(number)
    while not stop.is_set():
        pending = list(rounds.pending)
        answered = list(rounds.answered)
        roll = chooser.random()
        if roll < 0.45 and pending:
            kind, round_id = "valid", chooser.choice(pending)
            request = _answer(round_id, f"key-{round_id}", ADDRESS)
        elif roll < 0.65 and answered:
            kind, round_id = "duplicate", chooser.choice(answered)
            request = _answer(round_id, f"key-{round_id}", ADDRESS)
        elif roll < 0.80 and answered:
            kind, round_id = "conflict", chooser.choice(answered)
            request = _answer(round_id, f"other-{number}-{round_id}", ADDRESS)
        elif roll < 0.90 and (pending or answered):
            kind, round_id = "invalid", chooser.choice(pending or answered)
            request = _answer(round_id, f"bad-{number}", {"street": 5, "city": ["x"]})
        else:
            kind, round_id = "unknown_round", f"rnd_{chooser.getrandbits(64):016x}"
            request = _answer(round_id, "key", ADDRESS)
        started = time.monotonic()
        try:
            await stub.Respond(request, timeout=RPC_TIMEOUT)
        except grpc.aio.AioRpcError as error:
            tally.fail(error, kind)
        else:
            tally.ok[kind] += 1
            if kind == "valid":
                now = time.monotonic()
                rounds.answered.setdefault(round_id, now)
                if rounds.pending.pop(round_id, None) is not None:
                    rounds.changed.set()
        elapsed = (time.monotonic() - started) * 1000
        tally.respond_ms.append(elapsed)
        if kind == "valid":
            tally.valid_ms.append(elapsed)
        if not pending and not answered:
            await asyncio.sleep(0.05)


async def _feeder(stub: Any, rounds: Rounds, tally: Tally, stop: asyncio.Event) -> None:
    """One stream (not a measured watcher) that keeps `rounds.pending` current."""
    cursor = ""
    while not stop.is_set():
        call = stub.WatchPending(execution_service_pb2.WatchPendingRequest(cursor=cursor))
        try:
            async for event in call:
                cursor = event.cursor
                which = event.WhichOneof("event")
                if which == "round_pending":
                    pending = event.round_pending
                    if pending.round_id not in rounds.answered:
                        rounds.pending[pending.round_id] = pending.execution_id
                elif which == "round_left_pending":
                    rounds.pending.pop(event.round_left_pending.round_id, None)
                    rounds.changed.set()
        except grpc.aio.AioRpcError as error:
            if stop.is_set():
                return
            tally.fail(error, "feeder")
            await asyncio.sleep(0.2)


async def _watcher(stub: Any, rounds: Rounds, tally: Tally, stop: asyncio.Event) -> None:
    cursor = ""
    while not stop.is_set():
        call = stub.WatchPending(execution_service_pb2.WatchPendingRequest(cursor=cursor))
        try:
            async for event in call:
                received = time.monotonic()
                cursor = event.cursor
                tally.watch_events += 1
                if event.WhichOneof("event") == "round_left_pending":
                    acked = rounds.answered.get(event.round_left_pending.round_id)
                    if acked is not None:
                        tally.watch_ms.append(max(0.0, (received - acked) * 1000))
                if stop.is_set():
                    break
        except grpc.aio.AioRpcError as error:
            if stop.is_set():
                return
            tally.fail(error, "watch")
            await asyncio.sleep(0.2)
        finally:
            call.cancel()


async def _refill(
    stub: Any, rounds: Rounds, tally: Tally, target: int, stop: asyncio.Event
) -> None:
    """Keep about `target` executions paused: submit one for every round answered."""
    while not stop.is_set():
        missing = target - len(rounds.pending)
        # Rounds submitted but not pending yet count as coming: at most `target` in flight.
        if missing > 0 and tally.submitted - len(rounds.answered) < target + target // 2:
            try:
                await stub.Submit(submit_request(f"load-{tally.submitted}"), timeout=RPC_TIMEOUT)
                tally.submitted += 1
                tally.ok["submit"] += 1
            except grpc.aio.AioRpcError as error:
                tally.fail(error, "submit")
                await asyncio.sleep(0.2)
            continue
        rounds.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rounds.changed.wait(), timeout=0.5)


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


async def _sample_rss(
    pid: int, samples: list[tuple[float, int]], every: float, stop: asyncio.Event
) -> None:
    start = time.monotonic()
    while not stop.is_set():
        rss = _rss_kib(pid)
        if rss is not None:
            samples.append((time.monotonic() - start, rss))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)


async def _campaign(address: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    tally = Tally()
    rounds = Rounds()
    # A few channels: one HTTP/2 connection would serialise 500 callers' frames.
    channels = [grpc.aio.insecure_channel(address) for _ in range(4)]
    executions = [execution_service_pb2_grpc.ExecutionServiceStub(c) for c in channels]
    elicitation = [elicitation_service_pb2_grpc.ElicitationServiceStub(c) for c in channels]
    rss: list[tuple[float, int]] = []
    run_stop = asyncio.Event()
    background = [
        asyncio.create_task(_sample_rss(pid, rss, args.sample_seconds, run_stop)),
        asyncio.create_task(_feeder(executions[0], rounds, tally, run_stop)),
        asyncio.create_task(_refill(executions[0], rounds, tally, args.paused, run_stop)),
    ]
    try:
        deadline = time.monotonic() + SETUP_TIMEOUT
        while len(rounds.pending) < args.paused:
            if time.monotonic() > deadline or ABORT.is_set():
                raise RuntimeError(f"only {len(rounds.pending)} of {args.paused} executions paused")
            await asyncio.sleep(0.1)
        paused_at = time.monotonic()
        watchers = [
            asyncio.create_task(_watcher(executions[n % 4], rounds, tally, run_stop))
            for n in range(args.watchers)
        ]
        responders = [
            asyncio.create_task(_responder(n, elicitation[n % 4], rounds, tally, run_stop))
            for n in range(args.responders)
        ]
        warm_rss: int | None = None
        end = paused_at + args.seconds
        while time.monotonic() < end and not ABORT.is_set():
            await asyncio.sleep(0.2)
            if warm_rss is None and time.monotonic() - paused_at >= args.warmup_seconds:
                warm_rss = _rss_kib(pid)
        run_stop.set()
        await asyncio.wait_for(asyncio.gather(*responders, return_exceptions=True), RPC_TIMEOUT)
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        duration = time.monotonic() - paused_at
    finally:
        run_stop.set()
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        for channel in channels:
            await channel.close()
    values = [kib for _, kib in rss]
    start_rss = values[0] if values else None
    end_rss = values[-1] if values else None
    warm = warm_rss if warm_rss is not None else start_rss
    growth = None if not (warm and end_rss) else (end_rss - warm) / warm * 100
    return {
        "seconds": round(duration, 1),
        "responders": args.responders,
        "watchers": args.watchers,
        "paused": args.paused,
        "respond_calls": len(tally.respond_ms),
        "respond_per_second": round(len(tally.respond_ms) / duration, 1),
        "respond_ms": _quantiles(tally.respond_ms),
        "valid_respond_ms": _quantiles(tally.valid_ms),
        "watch_event_ms": _quantiles(tally.watch_ms),
        "watch_events": tally.watch_events,
        "rounds_answered": len(rounds.answered),
        "executions_submitted": tally.submitted,
        "ok": dict(sorted(tally.ok.items())),
        "failures": {
            f"{code}/{reason or '-'}": n for (code, reason), n in sorted(tally.failures.items())
        },
        "untyped_failures": {
            f"{code}/{reason or '-'}": n
            for (code, reason), n in sorted(tally.failures.items())
            if code in ("INTERNAL", "UNKNOWN") or (not reason and code not in CLIENT_SIDE)
        },
        "rss_kib": {
            "start": start_rss,
            "after_warmup": warm,
            "peak": max(values) if values else None,
            "end": end_rss,
            "end_vs_warmup_percent": None if growth is None else round(growth, 1),
            "flat": None if growth is None else abs(growth) <= args.flat_percent,
            "samples": len(values),
        },
    }


def _quantiles(values: list[float]) -> dict[str, float | int]:
    return {
        "n": len(values),
        "p50": round(percentile(values, 0.50), 1),
        "p99": round(percentile(values, 0.99), 1),
    }


def _print(report: dict[str, Any]) -> None:
    rss = report["rss_kib"]
    print(
        f"{report['seconds']} s, {report['responders']} concurrent Respond callers, "
        f"{report['watchers']} watchers, {report['paused']} executions kept paused"
    )
    print(
        f"Respond: {report['respond_calls']} calls ({report['respond_per_second']}/s), "
        f"p50 {report['respond_ms']['p50']} ms, p99 {report['respond_ms']['p99']} ms; "
        f"valid answers p50 {report['valid_respond_ms']['p50']} ms, "
        f"p99 {report['valid_respond_ms']['p99']} ms"
    )
    print(
        f"watchers: {report['watch_events']} events; answer-to-event p50 "
        f"{report['watch_event_ms']['p50']} ms, p99 {report['watch_event_ms']['p99']} ms "
        f"(n={report['watch_event_ms']['n']})"
    )
    print(
        f"rounds answered {report['rounds_answered']}, "
        f"executions submitted {report['executions_submitted']}"
    )
    print(f"calls by kind (':failed': refused with a typed error): {report['ok']}")
    print(f"failures by status/reason: {report['failures']}")
    print(
        f"service RSS (MiB): start {_mib(rss['start'])}, "
        f"after warm-up {_mib(rss['after_warmup'])}, "
        f"peak {_mib(rss['peak'])}, end {_mib(rss['end'])}; end vs warm-up "
        f"{rss['end_vs_warmup_percent']}% -> flat: {rss['flat']}"
    )
    if report["untyped_failures"]:
        print(f"UNTYPED OR INTERNAL FAILURES: {report['untyped_failures']}")


def _mib(kib: int | None) -> str:
    return "?" if kib is None else f"{kib / 1024:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--responders", type=int, default=500)
    parser.add_argument("--watchers", type=int, default=50)
    parser.add_argument("--paused", type=int, default=40)
    parser.add_argument("--pool-size", type=int, default=8)
    parser.add_argument("--warmup-seconds", type=float, default=5.0)
    parser.add_argument("--sample-seconds", type=float, default=0.5)
    parser.add_argument("--flat-percent", type=float, default=20.0)
    parser.add_argument("--smoke", action="store_true", help="a few seconds with small counts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seconds, args.responders, args.watchers, args.paused = 3.0, 40, 5, 3
        args.warmup_seconds = 1.0
    abort_on_signals(ABORT)
    with tempfile.TemporaryDirectory(prefix="m3-load-") as tmp:
        directory = Path(tmp)
        config = write_config(directory, args.pool_size, sys.executable)
        server = Server(config, directory / "server.log").start()
        try:
            report = asyncio.run(_campaign(server.address, server.pid, args))
        except Exception as exc:  # the run could not be set up or finished
            print(
                f"load_respond: {type(exc).__name__}: {exc}\n{server.log_tail()}", file=sys.stderr
            )
            return 1
        finally:
            server.stop(grace=10.0)
        if "Traceback" in (directory / "server.log").read_text():
            report["server_tracebacks"] = True
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 1 if report["untyped_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
