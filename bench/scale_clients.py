"""The client processes of bench/scale.py (the JSON-lines protocol of compare_common).

    python bench/scale_clients.py driver --address HOST:PORT [--address HOST:PORT] \
        --generation mrtr|legacy
    python bench/scale_clients.py watchers --address HOST:PORT --watchers K

driver: submits executions through the remote asyncio kit (round robin over the addresses:
replicas sharing the work), learns each one's pause and finish from one WatchPending
stream of its own (`round_pending` and `execution_finished` only), measures GetPending and
GetRound while they wait, and answers them all (round robin over the addresses again).
Commands: `pause`, `sample`, `answer`, `check_results`.

watchers: K WatchPending subscribers, each on a channel (a connection) of its own, every
kind of event, read as raw messages (no conversion to models: the client's CPU is not
what is measured). Each subscriber checks that it sees every round's `round_pending`
exactly once, its `round_left_pending` exactly once and after it, and every execution's
`execution_finished` exactly once and after its round left pending; and records, for every
round created while it watched, the time from the round's creation to its arrival.
Commands: `connect`, `wait`, `late` (one more subscriber's first event), `report`, `close`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from compare_common import Protocol
from compare_m3 import BINDING_PROTOCOL, PROMPT, TOOLS, answer_of

# A subscriber's first violations are kept (the rest only counted).
_KEPT_VIOLATIONS = 5


Handler = Callable[[str, dict[str, Any], float], Awaitable[dict[str, Any]]]


async def answer_commands(protocol: Protocol, handle: Handler) -> None:
    """Answer JSON-line commands on stdin with `handle(op, command, timeout)` until
    `{"op": "quit"}` or end of input; an error is answered, not raised."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        if not line.strip():
            continue
        command = json.loads(line)
        op = command.get("op")
        if op == "quit":
            return
        try:
            reply = await handle(op, command, float(command.get("timeout", 600)))
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        protocol.send(reply)


# -- driver --------------------------------------------------------------------------------


class Driver:
    def __init__(self, kits: list[Any], generation: str) -> None:
        self.kits = kits
        self.generation = generation
        self.agents = [kit.agents([{"harness": "scripted", "models": []}])[0] for kit in kits]
        # execution_id -> its pending round's ID / finished, fed by the follower.
        self._paused: dict[str, asyncio.Future[str]] = {}
        self._finished: dict[str, asyncio.Future[float]] = {}
        # (execution_id, round_id, the kit it was submitted through), in pause order.
        self.waiting: list[tuple[str, str, int]] = []
        self._submitted = 0

    def _future(self, table: dict[str, asyncio.Future[Any]], execution_id: str) -> Any:
        future = table.get(execution_id)
        if future is None:
            future = table[execution_id] = asyncio.get_running_loop().create_future()
        return future

    async def follow(self) -> None:
        from m3grpc.client import ExecutionFinished, RoundPending

        async for event in self.kits[0].watch_pending(kinds=[RoundPending, ExecutionFinished]):
            if isinstance(event, RoundPending):
                future = self._future(self._paused, event.round.execution_id)
                if not future.done():
                    future.set_result(event.round.round_id)
            elif isinstance(event, ExecutionFinished):
                future = self._future(self._finished, event.state.execution_id)
                if not future.done():
                    future.set_result(time.monotonic())

    async def pause(self, count: int, in_flight: int, timeout: float) -> dict[str, Any]:
        """Submit `count` executions, at most `in_flight` submits and pauses at once, and
        wait until each has paused."""
        deadline = time.monotonic() + timeout
        gate = asyncio.Semaphore(in_flight)
        failures: list[str] = []
        paused: list[tuple[str, str, int]] = []
        server = self.generation
        tools = [f"{server}:{TOOLS[self.generation]}"]

        async def one() -> None:
            index = self._submitted % len(self.kits)
            self._submitted += 1
            try:
                async with gate:
                    handle = await self.agents[index].submit(
                        PROMPT, server=server, tools=tools, human_input="managed"
                    )
                    future = self._future(self._paused, handle.execution_id)
                    left = max(deadline - time.monotonic(), 0.01)
                    round_id = await asyncio.wait_for(asyncio.shield(future), left)
                paused.append((handle.execution_id, round_id, index))
            except Exception as exc:
                failures.append(f"pause: {type(exc).__name__}: {exc}"[:300])

        start = time.monotonic()
        await asyncio.gather(*(one() for _ in range(count)))
        seconds = time.monotonic() - start
        self.waiting += paused
        return {
            "paused": len(paused),
            "seconds": seconds,
            "failures": failures[:10],
            "failure_count": len(failures),
        }

    async def sample(self, calls: int, timeout: float) -> dict[str, Any]:
        """GetPending and GetRound of random waiting executions, one call at a time."""
        deadline = time.monotonic() + timeout
        rng = random.Random(7)
        latencies: dict[str, list[float]] = {"get_pending": [], "get_round": []}
        failures: list[str] = []
        for _ in range(calls):
            if time.monotonic() >= deadline or not self.waiting:
                break
            execution_id, round_id, _ = rng.choice(self.waiting)
            kit = rng.choice(self.kits)
            start = time.perf_counter()
            pending = await kit.handle(execution_id).pending_elicitation()
            latencies["get_pending"].append(time.perf_counter() - start)
            if pending is None or pending.round_id != round_id:
                failures.append(f"GetPending of {execution_id}: {pending!r}"[:300])
            start = time.perf_counter()
            view = await kit.get_round(round_id)
            latencies["get_round"].append(time.perf_counter() - start)
            if view.round_id != round_id or view.status.value != "pending":
                failures.append(f"GetRound of {round_id}: {view.status!r}"[:300])
        return {**latencies, "failures": failures[:10], "failure_count": len(failures)}

    async def answer(self, in_flight: int, timeout: float) -> dict[str, Any]:
        """Answer every waiting round (at most `in_flight` Respond calls at once), then
        wait until every execution finished: seconds from the first answer to the last
        finish the follower saw."""
        deadline = time.monotonic() + timeout
        gate = asyncio.Semaphore(in_flight)
        failures: list[str] = []
        respond: list[float] = []
        responses = answer_of()

        async def one(position: int, execution_id: str, round_id: str) -> None:
            # Round robin again, shifted: an answer goes through the other replica
            # than the submission about half the time.
            kit = self.kits[(position // 2) % len(self.kits)]
            try:
                async with gate:
                    start = time.perf_counter()
                    await kit.respond(round_id, responses, idempotency_key=f"answer-{round_id}")
                    respond.append(time.perf_counter() - start)
            except Exception as exc:
                failures.append(f"respond: {type(exc).__name__}: {exc}"[:300])

        start = time.monotonic()
        waiting, self.waiting = self.waiting, []
        finishes = [self._future(self._finished, e) for e, _, _ in waiting]
        await asyncio.gather(*(one(i, e, r) for i, (e, r, _) in enumerate(waiting)))
        responded = time.monotonic() - start
        done, not_done = await asyncio.wait(
            finishes, timeout=max(deadline - time.monotonic(), 0.01)
        )
        last = max((f.result() for f in done), default=start)
        if not_done:
            failures.append(f"{len(not_done)} executions did not finish in time")
        self._answered = [e for e, _, _ in waiting]
        return {
            "answered": len(respond),
            "finished": len(done),
            "seconds": max(last - start, 0.0),
            "respond_seconds": responded,
            "respond": respond,
            "failures": failures[:10],
            "failure_count": len(failures),
        }

    async def check_results(self, count: int) -> dict[str, Any]:
        """The results of `count` of the answered executions (spread over them):
        each must have succeeded."""
        answered = getattr(self, "_answered", [])
        step = max(len(answered) // max(count, 1), 1)
        failures: list[str] = []
        checked = 0
        for execution_id in answered[::step][:count]:
            result = await self.kits[0].handle(execution_id).result(timeout=30)
            checked += 1
            if getattr(result.outcome, "value", result.outcome) != "succeeded":
                failures.append(f"{execution_id}: {result.outcome} {result.failure_code}")
        return {"checked": checked, "failures": failures[:10], "failure_count": len(failures)}


async def run_driver(args: argparse.Namespace, protocol: Protocol) -> None:
    from m3grpc.client import AsyncRemoteMCPTestKit

    kits = [AsyncRemoteMCPTestKit(address, timeout=120) for address in args.address]
    driver = Driver(kits, args.generation)
    follower = asyncio.create_task(driver.follow())
    try:
        warm = await driver.pause(1, 1, 60)  # imports, connections; proves the setup
        if warm["paused"] != 1:
            raise RuntimeError(f"the warm-up execution did not pause: {warm}")
        warmed = await driver.answer(1, 60)
        if warmed["finished"] != 1:
            raise RuntimeError(f"the warm-up execution did not finish: {warmed}")
        protocol.send({"ready": {"addresses": args.address}})

        async def handle(op: str, command: dict[str, Any], timeout: float) -> dict[str, Any]:
            if op == "pause":
                return await driver.pause(int(command["count"]), int(command["in_flight"]), timeout)
            if op == "sample":
                return await driver.sample(int(command["calls"]), timeout)
            if op == "answer":
                return await driver.answer(int(command["in_flight"]), timeout)
            if op == "check_results":
                return await driver.check_results(int(command["count"]))
            return {"error": f"unknown op {op!r}"}

        await answer_commands(protocol, handle)
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await follower
        for kit in kits:
            await kit.close()


# -- watchers ------------------------------------------------------------------------------

_PENDING, _LEFT = 1, 2


@dataclass
class Subscriber:
    """One WatchPending stream and what it has seen."""

    index: int
    connected_wall: float = 0.0
    connected: float = 0.0
    first_event: float | None = None
    rounds: dict[str, int] = field(default_factory=dict)  # round_id -> _PENDING / _LEFT
    round_of: dict[str, str] = field(default_factory=dict)  # execution_id -> its last round
    finished: set[str] = field(default_factory=set)
    pending_events = 0
    left_events = 0
    finished_events = 0
    live_latencies: list[float] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    violation_count = 0
    ended: str | None = None

    def violated(self, text: str) -> None:
        self.violation_count += 1
        if len(self.violations) < _KEPT_VIOLATIONS:
            self.violations.append(text)

    def seen(self, message: Any, received_wall: float) -> None:
        if self.first_event is None:
            self.first_event = time.monotonic() - self.connected
        kind = message.WhichOneof("event")
        if kind == "round_pending":
            round_message = message.round_pending
            round_id = round_message.round_id
            self.pending_events += 1
            if round_id in self.rounds:
                self.violated(f"round_pending of {round_id} again")
                return
            self.rounds[round_id] = _PENDING
            self.round_of[round_message.execution_id] = round_id
            created = round_message.create_time.ToNanoseconds() / 1e9
            if created >= self.connected_wall:
                self.live_latencies.append(received_wall - created)
        elif kind == "round_left_pending":
            round_id = message.round_left_pending.round_id
            self.left_events += 1
            state = self.rounds.get(round_id)
            if state != _PENDING:
                what = "again" if state == _LEFT else "before its round_pending"
                self.violated(f"round_left_pending of {round_id} {what}")
            self.rounds[round_id] = _LEFT
        elif kind == "execution_finished":
            execution_id = message.execution_finished.execution_id
            self.finished_events += 1
            if execution_id in self.finished:
                self.violated(f"execution_finished of {execution_id} again")
            round_id = self.round_of.get(execution_id)
            if round_id is not None and self.rounds.get(round_id) != _LEFT:
                self.violated(f"execution_finished of {execution_id} before its round left")
            self.finished.add(execution_id)


class Watchers:
    def __init__(self, address: str, count: int) -> None:
        self.address = address
        self.subscribers = [Subscriber(i) for i in range(count)]
        self._tasks: list[asyncio.Task[None]] = []
        self._channels: list[Any] = []
        self._changed = asyncio.Event()

    async def _watch(self, subscriber: Subscriber) -> None:
        import grpc

        from m3grpc.wire.gen.m3.v1 import execution_service_pb2, execution_service_pb2_grpc

        channel = grpc.aio.insecure_channel(self.address)
        self._channels.append(channel)
        stub = execution_service_pb2_grpc.ExecutionServiceStub(channel)  # type: ignore[no-untyped-call]
        subscriber.connected_wall = time.time()
        subscriber.connected = time.monotonic()
        call = stub.WatchPending(execution_service_pb2.WatchPendingRequest())
        try:
            async for message in call:
                subscriber.seen(message, time.time())
                self._changed.set()
            subscriber.ended = "the stream ended"
        except asyncio.CancelledError:
            call.cancel()
            raise
        except Exception as exc:
            subscriber.ended = f"{type(exc).__name__}: {exc}"[:300]
        self._changed.set()

    async def _until(self, done: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
        return True

    async def connect(self, timeout: float) -> dict[str, Any]:
        """Open every stream at once; reply once each has its first event."""
        start = time.monotonic()
        self._tasks = [asyncio.create_task(self._watch(s)) for s in self.subscribers]
        reached = await self._until(
            lambda: all(s.first_event is not None or s.ended for s in self.subscribers), timeout
        )
        return {
            "first_event_seconds": [s.first_event for s in self.subscribers],
            "all_reached": reached,
            "seconds": time.monotonic() - start,
        }

    async def late(self, timeout: float) -> dict[str, Any]:
        """One more subscriber while the others watch: the time to its first event (its
        stream then closes; it is not one of the subscribers checked)."""
        subscriber = Subscriber(len(self.subscribers))
        task = asyncio.create_task(self._watch(subscriber))
        try:
            await self._until(
                lambda: subscriber.first_event is not None or subscriber.ended, timeout
            )
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        return {"first_event_seconds": subscriber.first_event, "ended": subscriber.ended}

    async def wait(self, pending: int, left: int, finished: int, timeout: float) -> dict[str, Any]:
        """Until every subscriber has seen at least these numbers of rounds pending,
        rounds left pending and executions finished (or one's stream ended)."""
        start = time.monotonic()

        def reached(s: Subscriber) -> bool:
            return (
                len(s.rounds) >= pending
                and sum(1 for state in s.rounds.values() if state == _LEFT) >= left
                and len(s.finished) >= finished
            )

        # Counting LEFT states is O(rounds): check the cheap counters first.
        def done(s: Subscriber) -> bool:
            return (
                s.pending_events >= pending
                and s.left_events >= left
                and s.finished_events >= finished
                and reached(s)
            )

        # Waits while a stream is open and short of the counts; a stream that ended
        # short of them has not reached them.
        await self._until(lambda: all(s.ended or done(s) for s in self.subscribers), timeout)
        ok = all(done(s) for s in self.subscribers)
        return {"reached": ok, "seconds": time.monotonic() - start, **self._counts()}

    def _counts(self) -> dict[str, Any]:
        return {
            "rounds_pending_seen": [len(s.rounds) for s in self.subscribers],
            "finished_seen": [len(s.finished) for s in self.subscribers],
            "ended": [s.ended for s in self.subscribers if s.ended],
        }

    def report(self) -> dict[str, Any]:
        latencies = [x for s in self.subscribers for x in s.live_latencies]
        return {
            **self._counts(),
            "live_latencies": latencies,
            "violations": [v for s in self.subscribers for v in s.violations],
            "violation_count": sum(s.violation_count for s in self.subscribers),
            "rounds_left_seen": [
                sum(1 for state in s.rounds.values() if state == _LEFT) for s in self.subscribers
            ],
        }

    async def close(self) -> dict[str, Any]:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for channel in self._channels:
            await channel.close()
        self._tasks, self._channels = [], []
        return {"closed": len(self.subscribers)}


async def run_watchers(args: argparse.Namespace, protocol: Protocol) -> None:
    watchers = Watchers(args.address[0], args.watchers)
    protocol.send({"ready": {"watchers": args.watchers}})

    async def handle(op: str, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        if op == "connect":
            return await watchers.connect(timeout)
        if op == "wait":
            counts = (int(command[k]) for k in ("pending", "left", "finished"))
            return await watchers.wait(*counts, timeout)
        if op == "late":
            return await watchers.late(timeout)
        if op == "report":
            return watchers.report()
        if op == "close":
            return await watchers.close()
        return {"error": f"unknown op {op!r}"}

    try:
        await answer_commands(protocol, handle)
    finally:
        await watchers.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["driver", "watchers"])
    parser.add_argument("--address", action="append", required=True)
    parser.add_argument("--generation", choices=sorted(BINDING_PROTOCOL), default="mrtr")
    parser.add_argument("--watchers", type=int, default=50)
    args = parser.parse_args()
    protocol = Protocol()
    runner = run_driver if args.mode == "driver" else run_watchers
    asyncio.run(runner(args, protocol))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
