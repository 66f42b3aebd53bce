"""The M3 worker process of bench/compare.py (see compare_common for the protocol).

    python bench/compare_m3.py embedded --generation legacy|mrtr --mcp-url URL --database F
        --concurrency C
    python bench/compare_m3.py grpc --address HOST:PORT --generation legacy|mrtr
    python bench/compare_m3.py watchers --address HOST:PORT --watchers K --expect N
    python bench/compare_m3.py echo       (a bare gRPC unary echo server, for the raw limit)

embedded: an `AsyncMCPTestKit` on an SQLite store (WAL, synchronous=FULL, the store's
default) with the scripted harness calling `book_legacy` or `book_mrtr` on the shared HTTP
MCP server (binding protocol "legacy" or "2026-07-28"). grpc: `AsyncRemoteMCPTestKit`
against a running `m3grpc serve` whose bindings `legacy` / `mrtr` point at the same server.

A round: Submit -> wait until its round is pending -> answer (`respond_elicitation`) ->
`result()`. The wait for the pause is pushed, as each API's users wait (embedded: the
handle's `wait_for_pending`, woken by the worker that stored the round; grpc: one
`WatchPending` stream over all executions, asking only for `round_pending` events), so
waiting costs no polling.
Measured per round: answer sent -> the tool's code after the pause ran (the timestamp the
MCP server put into the result) and answer sent -> `result()` returned.

Commands (JSON lines): `{"op": "closed", "rounds": N, "in_flight": P, "timeout": S}` (N rounds
from Submit, at most P at once), `{"op": "answer", "in_flight": P, "batches": B, "timeout": S}`
(B times: bring P executions to their pause untimed, then answer all P at once; timed from
the first answer to the last result), and for the scale mode (grpc) `scale_pause`,
`scale_get_pending`, `scale_answer`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Literal
from typing import Protocol as TypingProtocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from compare_common import (
    ANSWER,
    REQUEST_KEY,
    PragmaProbe,
    Protocol,
    Tally,
    resumed_ns_in,
)

PROMPT = "Ask for the delivery address, then book the shipment."
TOOLS = {"legacy": "book_legacy", "mrtr": "book_mrtr"}
BINDING_PROTOCOL: dict[str, Literal["legacy", "2026-07-28"]] = {
    "legacy": "legacy",
    "mrtr": "2026-07-28",
}


class Handle(TypingProtocol):
    execution_id: str

    async def respond_elicitation(
        self, round_id: str, responses: Any, *, idempotency_key: str
    ) -> None: ...

    async def result(self, timeout: float | None = None) -> Any: ...

    async def cancel(self) -> None: ...

    async def pending_elicitation(self) -> Any: ...

    async def wait_for_pending(self, timeout: float | None = None) -> Any: ...


class Pauses:
    """execution_id -> a future of its pending round's ID, fed by an event follower."""

    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[tuple[str, float]]] = {}

    def future(self, execution_id: str) -> asyncio.Future[tuple[str, float]]:
        future = self._futures.get(execution_id)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._futures[execution_id] = future
        return future

    def paused(self, execution_id: str, round_id: str) -> None:
        future = self.future(execution_id)
        if not future.done():
            future.set_result((round_id, time.monotonic()))

    def forget(self, execution_id: str) -> None:
        self._futures.pop(execution_id, None)


class System:
    """One way of running M3 (embedded or over gRPC) for one protocol generation."""

    def __init__(self, generation: str, kit: Any, server: Any, tool: str) -> None:
        self.generation = generation
        self.pauses = Pauses()
        self.kit = kit
        self.agent = kit.agents([{"harness": "scripted", "models": []}])[0]
        self.server = server  # a binding (embedded) or a binding's name (gRPC)
        self.tool = tool

    async def submit(self) -> Handle:
        handle: Handle = await self.agent.submit(
            PROMPT, server=self.server, tools=[self.tool], human_input="managed"
        )
        return handle

    async def follow(self) -> None:
        raise NotImplementedError

    def pragmas(self) -> dict[str, Any]:
        return {}


class Embedded(System):
    def __init__(self, args: argparse.Namespace, kit: Any) -> None:
        from m3grpc import HttpServer

        binding = HttpServer(
            name="bench", url=args.mcp_url, protocol=BINDING_PROTOCOL[args.generation]
        )
        super().__init__(args.generation, kit, binding, f"bench:{TOOLS[args.generation]}")

    async def follow(self) -> None:
        """Nothing to follow: each round waits on its own handle (below)."""

    async def until_paused(self, handle: Handle, deadline: float) -> str:
        # The embedded kit's push-based wait, as its users wait: woken by the worker
        # with the round it stored.
        pending = await handle.wait_for_pending(max(deadline - time.monotonic(), 0.01))
        if pending is None:
            raise RuntimeError(f"execution {handle.execution_id} finished without a round")
        return str(pending.round_id)


class Remote(System):
    def __init__(self, args: argparse.Namespace, kit: Any) -> None:
        # The service's config names its bindings after the generations.
        generation = args.generation
        super().__init__(generation, kit, generation, f"{generation}:{TOOLS[generation]}")

    async def follow(self) -> None:
        from m3grpc.client import RoundPending

        # Only new rounds: the follower has no use for the other two events of a
        # round, which would cost the service two stream messages each time.
        async for event in self.kit.watch_pending(kinds=[RoundPending]):
            if isinstance(event, RoundPending):
                self.pauses.paused(event.round.execution_id, event.round.round_id)


class StepFailed(Exception):
    """A round failed at a named step (submit, pause, respond, result)."""


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    try:
        yield
    except StepFailed:
        raise
    except Exception as exc:
        raise StepFailed(f"{name}: {type(exc).__name__}: {str(exc)[:300]}") from exc


def answer_of() -> Any:
    from m3grpc import ElicitationResponse

    return {REQUEST_KEY: ElicitationResponse(action="accept", content=ANSWER)}


async def answer(
    handle: Handle, round_id: str, deadline: float, *, before: Callable[[], None] | None = None
) -> tuple[float, float]:
    """Answer the round, wait for the result: (answer -> resumed, answer -> result) in s."""
    responses = answer_of()
    if before is not None:
        before()
    sent = time.monotonic_ns()
    with step("respond"):
        await handle.respond_elicitation(round_id, responses, idempotency_key=f"answer-{round_id}")
    with step("result"):
        result = await handle.result(timeout=max(deadline - time.monotonic(), 0.1))
    done = time.monotonic_ns()
    if str(result.outcome) not in ("succeeded", "ExecutionOutcome.SUCCEEDED"):
        raise RuntimeError(f"execution {handle.execution_id} ended {result.outcome}")
    resumed = resumed_ns_in(json.dumps(result.model_dump(mode="json")))
    if resumed is None:
        raise RuntimeError(f"execution {handle.execution_id}: no timestamp in its result")
    return (resumed - sent) / 1e9, (done - sent) / 1e9


async def until_paused(system: System, handle: Handle, deadline: float) -> str:
    if isinstance(system, Embedded):
        return await system.until_paused(handle, deadline)
    future = system.pauses.future(handle.execution_id)
    try:
        round_id, _ = await asyncio.wait_for(future, max(deadline - time.monotonic(), 0.01))
    finally:
        system.pauses.forget(handle.execution_id)
    return round_id


async def cancel_quietly(handles: list[Handle]) -> None:
    for handle in handles:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.cancel(), 5)


async def closed_loop(
    system: System, rounds: int, in_flight: int, timeout: float
) -> dict[str, Any]:
    tally = Tally(timeout)
    started: list[Handle] = []
    finished: set[str] = set()
    issued = 0

    async def driver() -> None:
        nonlocal issued
        while issued < rounds and tally.left() > 0:
            issued += 1
            try:
                with step("submit"):
                    handle = await system.submit()
                started.append(handle)
                with step("pause"):
                    round_id = await until_paused(system, handle, tally.deadline)
                tally.answered(await answer(handle, round_id, tally.deadline))
                finished.add(handle.execution_id)
            except Exception as exc:  # recorded, the loop goes on until the deadline
                tally.failed(exc)

    with tally.measured():
        tasks = [asyncio.create_task(driver()) for _ in range(in_flight)]
        await asyncio.wait(tasks, timeout=tally.left() + 5)
    for task in tasks:
        task.cancel()
    await cancel_quietly([h for h in started if h.execution_id not in finished])
    return tally.reply()


async def pause_many(
    system: System, count: int, deadline: float, submit_in_flight: int = 32
) -> tuple[list[tuple[Handle, str]], list[Handle], list[str]]:
    """Submit `count` executions (at most `submit_in_flight` submits at once), wait for
    every one to pause: ([(handle, round_id)], every handle started, failures)."""
    gate = asyncio.Semaphore(submit_in_flight)
    started: list[Handle] = []
    failures: list[str] = []

    async def one() -> tuple[Handle, str] | None:
        try:
            async with gate:
                handle = await system.submit()
            started.append(handle)
            return handle, await until_paused(system, handle, deadline)
        except Exception as exc:
            failures.append(f"pause: {type(exc).__name__}: {exc}")
            return None

    results = await asyncio.gather(*(one() for _ in range(count)))
    return [r for r in results if r is not None], started, failures


async def answer_one(
    handle: Handle, round_id: str, tally: Tally, first: list[float], answered: set[str]
) -> None:
    """One answer of a batch; `first` gets the time the batch's first answer left."""

    def mark() -> None:
        if not first:
            first.append(time.monotonic())

    try:
        tally.answered(await answer(handle, round_id, tally.deadline, before=mark))
        answered.add(handle.execution_id)
    except Exception as exc:
        tally.failed(exc, "answer")


async def answer_phase(
    system: System, in_flight: int, batches: int, timeout: float
) -> dict[str, Any]:
    tally = Tally(timeout)
    for _ in tally.batches(batches):
        paused, started, problems = await pause_many(system, in_flight, tally.deadline)
        tally.failures += problems
        answered: set[str] = set()
        first: list[float] = []
        # Wall time runs from the batch's first answer, not from the pauses.
        with tally.measured(wall=False):
            await asyncio.gather(*(answer_one(h, r, tally, first, answered) for h, r in paused))
        if first:
            tally.wall += time.monotonic() - first[0]
        await cancel_quietly([h for h in started if h.execution_id not in answered])
    return tally.reply()


# -- scale mode (grpc) -------------------------------------------------------------------


class Scale:
    def __init__(self, system: System) -> None:
        self.system = system
        self.paused: list[tuple[Handle, str]] = []
        self.started: list[Handle] = []

    async def pause(self, count: int, timeout: float) -> dict[str, Any]:
        start = time.monotonic()
        self.paused, self.started, failures = await pause_many(self.system, count, start + timeout)
        return {
            "paused": len(self.paused),
            "seconds": time.monotonic() - start,
            "failures": failures[:20],
            "failure_count": len(failures),
        }

    async def get_pending(self, calls: int, timeout: float) -> dict[str, Any]:
        """GetPending of random paused executions, one call at a time."""
        deadline = time.monotonic() + timeout
        latencies: list[float] = []
        failures: list[str] = []
        rng = random.Random(7)
        while len(latencies) + len(failures) < calls and self.paused:
            if time.monotonic() >= deadline:
                failures.append("ran out of time")
                break
            handle, round_id = rng.choice(self.paused)
            start = time.monotonic()
            pending = await handle.pending_elicitation()
            latencies.append(time.monotonic() - start)
            if pending is None or pending.round_id != round_id:
                failures.append(f"GetPending of {handle.execution_id}: {pending!r}")
        return {"latencies": latencies, "failures": failures[:20]}

    async def answer_all(self, timeout: float) -> dict[str, Any]:
        tally = Tally(timeout)
        answered: set[str] = set()
        with tally.measured():
            await asyncio.gather(*(answer_one(h, r, tally, [], answered) for h, r in self.paused))
        await cancel_quietly([h for h in self.started if h.execution_id not in answered])
        return {
            "answered": len(answered),
            "seconds": tally.wall,
            "resume": tally.resume,
            "result": tally.result,
            "failures": tally.failures[:20],
            "failure_count": len(tally.failures),
        }


# -- watchers (scale mode) ----------------------------------------------------------------


async def run_watchers(args: argparse.Namespace, protocol: Protocol) -> None:
    """K WatchPending subscribers; for every round that becomes pending, each records
    receive time - the round's create time (both the machine's wall clock)."""
    from m3grpc.client import AsyncRemoteMCPTestKit, RoundPending

    latencies: list[list[float]] = [[] for _ in range(args.watchers)]
    done = asyncio.Event()
    counts = [0] * args.watchers

    async def watch(index: int, kit: Any) -> None:
        stream: AsyncIterator[Any] = kit.watch_pending()
        async for event in stream:
            if isinstance(event, RoundPending):
                latencies[index].append(time.time() - event.round.created_at.timestamp())
                counts[index] += 1
                if all(c >= args.expect for c in counts):
                    done.set()

    async with AsyncRemoteMCPTestKit(args.address, timeout=30) as kit:
        tasks = [asyncio.create_task(watch(i, kit)) for i in range(args.watchers)]
        await asyncio.sleep(1.0)  # the streams are open before anything is submitted
        protocol.send({"ready": {"watchers": args.watchers}})
        loop = asyncio.get_running_loop()
        stop = loop.run_in_executor(None, sys.stdin.readline)  # any line (or EOF) ends it
        waiter = asyncio.ensure_future(done.wait())
        await asyncio.wait([stop, waiter], timeout=args.timeout, return_when="FIRST_COMPLETED")
        for task in tasks:
            task.cancel()
        waiter.cancel()
    protocol.send({"latencies": latencies, "counts": counts})


# -- main ---------------------------------------------------------------------------------


async def serve_commands(system: System, protocol: Protocol, info: dict[str, Any]) -> None:
    follower = asyncio.create_task(system.follow())
    loop = asyncio.get_running_loop()
    scale = Scale(system)
    try:
        # One untimed round: imports, first connection, caches; and it proves the setup.
        handle = await system.submit()
        round_id = await until_paused(system, handle, time.monotonic() + 60)
        await answer(handle, round_id, time.monotonic() + 60)
        protocol.send({"ready": {**info, "pragmas": system.pragmas()}})
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line or not line.strip():
                if not line:
                    break
                continue
            command = json.loads(line)
            op = command.get("op")
            if op == "quit":
                break
            try:
                timeout = float(command.get("timeout", 120))
                if op == "closed":
                    reply = await closed_loop(
                        system, int(command["rounds"]), int(command["in_flight"]), timeout
                    )
                elif op == "answer":
                    reply = await answer_phase(
                        system, int(command["in_flight"]), int(command["batches"]), timeout
                    )
                elif op == "scale_pause":
                    reply = await scale.pause(int(command["count"]), timeout)
                elif op == "scale_get_pending":
                    reply = await scale.get_pending(int(command["calls"]), timeout)
                elif op == "scale_answer":
                    reply = await scale.answer_all(timeout)
                else:
                    reply = {"error": f"unknown op {op!r}"}
            except Exception as exc:
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            protocol.send(reply)
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await follower


async def run_echo(protocol: Protocol) -> None:
    """A bare gRPC unary method (bytes in, the same bytes out) on a `grpc.aio` server, as
    M3's service uses: the floor under any M3 call. Runs until stdin closes."""
    import grpc

    async def echo(request: bytes, _context: Any) -> bytes:
        return request

    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "bench.Echo", {"Call": grpc.unary_unary_rpc_method_handler(echo)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    protocol.send({"ready": {"address": f"127.0.0.1:{port}"}})
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(0)


async def main_async(args: argparse.Namespace, protocol: Protocol) -> None:
    if args.mode == "watchers":
        await run_watchers(args, protocol)
        return
    if args.mode == "echo":
        await run_echo(protocol)
        return
    probe = PragmaProbe()
    probe.install()
    info = {"system": args.mode, "generation": args.generation}
    if args.mode == "embedded":
        from m3grpc import AsyncMCPTestKit
        from m3grpc.storage import SQLiteExecutionStore

        store = SQLiteExecutionStore(args.database)
        try:
            async with AsyncMCPTestKit(store=store, env={}, concurrency=args.concurrency) as kit:
                system: System = Embedded(args, kit)
                system.pragmas = probe.summary  # type: ignore[method-assign]
                await serve_commands(system, protocol, info)
        finally:
            store.close()
    else:
        from m3grpc.client import AsyncRemoteMCPTestKit

        async with AsyncRemoteMCPTestKit(args.address, timeout=60) as kit:
            await serve_commands(Remote(args, kit), protocol, info)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["embedded", "grpc", "watchers", "echo"])
    parser.add_argument("--generation", choices=["legacy", "mrtr"], default="legacy")
    parser.add_argument("--mcp-url")
    parser.add_argument("--database")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--address")
    parser.add_argument("--watchers", type=int, default=1)
    parser.add_argument("--expect", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    protocol = Protocol()
    asyncio.run(main_async(args, protocol))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
