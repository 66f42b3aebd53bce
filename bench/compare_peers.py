"""The peer worker process of bench/compare.py, run by bench/.venv-bench's interpreter
(see compare_common for the protocol).

    bench/.venv-bench/bin/python bench/compare_peers.py langgraph --database F [--durability sync]
    bench/.venv-bench/bin/python bench/compare_peers.py dbos --database F [--poll-seconds 0.01]

The same work as M3's: pause for one answer, answer, resume, finish, then the same step
after the pause (`compare_common.after_pause`), each used the way its documentation shows:

- langgraph: a `StateGraph` with node `ask` (`interrupt(...)`) then node `book` (the step
  after the pause), compiled with the sync `SqliteSaver` on a `sqlite3` connection (WAL,
  `synchronous=FULL`); `graph.invoke(input, config)` runs to the interrupt,
  `graph.invoke(Command(resume=answer), config)` resumes and finishes. Checkpoints are
  written with `durability="sync"` (each step's checkpoint is committed before the next
  step starts), the durability closest to M3's.
- dbos: a `@DBOS.workflow()` that `set_event`s "paused", `DBOS.recv`s the answer, then runs
  `@DBOS.step()` `book`; the driver `start_workflow`s it, `get_event`s "paused",
  `DBOS.send`s the answer and `get_result`s. System database: SQLite (the file is put in
  WAL mode before DBOS opens it; DBOS keeps SQLite's default `synchronous=FULL`). On SQLite,
  DBOS learns of a sent message by polling every `notification_listener_polling_interval_sec`
  (default 1 s; set to --poll-seconds, default 0.01).

Drivers are threads (both APIs are synchronous): P rounds in flight = P threads.
Commands: as compare_m3 (`closed`, `answer`).
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypedDict, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_common import (
    ANSWER,
    QUESTION,
    REQUEST_KEY,
    PragmaProbe,
    Protocol,
    Tally,
    after_pause,
    read_pragmas,
)

# start() -> a paused round; answer(round) -> the monotonic ns at which the step after the
# pause ran. The driver times answer sent -> that, and answer sent -> answer() returned.
Start = Callable[[], Any]
Answer = Callable[[Any], int]


class Peer:
    name = ""

    def start(self) -> Any:
        raise NotImplementedError

    def answer(self, paused: Any) -> int:
        raise NotImplementedError

    def pragmas(self) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class BookingState(TypedDict, total=False):
    address: dict[str, str]
    result: str
    resumed_ns: int


class LangGraphPeer(Peer):
    name = "langgraph"

    def __init__(self, database: str, durability: str) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Command, interrupt

        self._command = Command
        # As the SqliteSaver documentation shows: one connection, shared by threads (the
        # saver serialises its use with a lock).
        self.conn = sqlite3.connect(database, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(self.conn)
        saver.setup()
        self.durability = cast(Literal["sync", "async", "exit"], durability)

        def ask(state: BookingState) -> BookingState:
            return {"address": interrupt({"message": QUESTION, "key": REQUEST_KEY})}

        def book(state: BookingState) -> BookingState:
            text, resumed_ns = after_pause(state["address"])
            return {"result": text, "resumed_ns": resumed_ns}

        builder = StateGraph(BookingState)
        builder.add_node("ask", ask)
        builder.add_node("book", book)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", "book")
        builder.add_edge("book", END)
        self.graph = builder.compile(checkpointer=saver)

    def start(self) -> Any:
        config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
        out = self.graph.invoke(BookingState(), config, durability=self.durability)
        if "__interrupt__" not in out:
            raise RuntimeError(f"the graph did not pause: {out!r}")
        return config

    def answer(self, paused: Any) -> int:
        out = self.graph.invoke(
            self._command(resume=dict(ANSWER)), paused, durability=self.durability
        )
        if not str(out.get("result", "")).startswith("booked shipment"):
            raise RuntimeError(f"unexpected result {out!r}")
        return int(out["resumed_ns"])

    def pragmas(self) -> dict[str, Any]:
        with self.graph.checkpointer.lock:  # type: ignore[union-attr]
            return {Path(self.database_name()).name: read_pragmas(self.conn)}

    def database_name(self) -> str:
        rows = self.conn.execute("PRAGMA database_list").fetchall()
        return str(next(row[2] for row in rows if row[1] == "main"))

    def close(self) -> None:
        self.conn.close()


class DbosPeer(Peer):
    name = "dbos"

    def __init__(self, database: str, poll_seconds: float, probe: PragmaProbe) -> None:
        from dbos import DBOS, DBOSConfig

        # WAL is a property of the database file: set it before DBOS creates its schema.
        with sqlite3.connect(database) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
        self.probe = probe
        config: DBOSConfig = {
            "name": "m3-bench-peer",
            "system_database_url": f"sqlite:///{database}",
            "notification_listener_polling_interval_sec": poll_seconds,
            "log_level": "WARNING",
        }
        DBOS(config=config)

        @DBOS.step()
        def book(address: dict[str, str]) -> dict[str, Any]:
            text, resumed_ns = after_pause(address)
            return {"result": text, "resumed_ns": resumed_ns}

        @DBOS.workflow()
        def booking() -> dict[str, Any]:
            DBOS.set_event("paused", True)
            address = DBOS.recv(REQUEST_KEY, timeout_seconds=600)
            if address is None:
                raise RuntimeError("no answer arrived")
            return book(address)

        self._dbos = DBOS
        self._booking = booking
        DBOS.launch()

    def start(self) -> Any:
        handle = self._dbos.start_workflow(self._booking)
        if self._dbos.get_event(handle.workflow_id, "paused", timeout_seconds=120) is not True:
            raise RuntimeError("the workflow did not pause")
        return handle

    def answer(self, paused: Any) -> int:
        self._dbos.send(paused.workflow_id, dict(ANSWER), REQUEST_KEY)
        out = paused.get_result()
        return int(out["resumed_ns"])

    def pragmas(self) -> dict[str, Any]:
        return self.probe.summary()

    def close(self) -> None:
        self._dbos.destroy()


def timed_answer(peer: Peer, paused: Any) -> tuple[float, float]:
    sent = time.monotonic_ns()
    resumed = peer.answer(paused)
    done = time.monotonic_ns()
    return (resumed - sent) / 1e9, (done - sent) / 1e9


def closed_loop(peer: Peer, rounds: int, in_flight: int, timeout: float) -> dict[str, Any]:
    tally = Tally(timeout)
    lock = threading.Lock()
    issued = [0]

    def driver() -> None:
        while tally.left() > 0:
            with lock:
                if issued[0] >= rounds:
                    return
                issued[0] += 1
            try:
                tally.answered(timed_answer(peer, peer.start()))
            except Exception as exc:  # recorded; the loop goes on until the deadline
                tally.failed(exc)

    with tally.measured():
        threads = [threading.Thread(target=driver, daemon=True) for _ in range(in_flight)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=tally.left() + 10)
    return tally.reply()


def answer_phase(peer: Peer, in_flight: int, batches: int, timeout: float) -> dict[str, Any]:
    tally = Tally(timeout)
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        for _ in tally.batches(batches):
            starts = [pool.submit(peer.start) for _ in range(in_flight)]
            paused = []
            for future in starts:
                try:
                    paused.append(future.result(timeout=tally.left(0.1)))
                except Exception as exc:
                    tally.failed(exc, "pause")
            barrier = threading.Barrier(len(paused)) if paused else None

            def one(
                round_: Any, barrier: threading.Barrier | None = barrier
            ) -> tuple[float, float]:
                if barrier is not None:
                    barrier.wait(timeout=60)  # every answer leaves together
                return timed_answer(peer, round_)

            with tally.measured():
                answers = [pool.submit(one, p) for p in paused]
                for future in answers:
                    try:
                        tally.answered(future.result(timeout=tally.left(0.1)))
                    except Exception as exc:
                        tally.failed(exc, "answer")
    return tally.reply()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=["langgraph", "dbos"])
    parser.add_argument("--database", required=True)
    parser.add_argument("--durability", default="sync", choices=["sync", "async", "exit"])
    parser.add_argument("--poll-seconds", type=float, default=0.01)
    args = parser.parse_args()
    protocol = Protocol()
    probe = PragmaProbe()
    probe.install()
    peer: Peer
    if args.peer == "langgraph":
        peer = LangGraphPeer(args.database, args.durability)
        settings = {"durability": args.durability}
    else:
        peer = DbosPeer(args.database, args.poll_seconds, probe)
        settings = {"notification_listener_polling_interval_sec": args.poll_seconds}
    try:
        timed_answer(peer, peer.start())  # untimed warm-up round
        versions = {}
        for package in ("langgraph", "langgraph-checkpoint-sqlite", "dbos"):
            from importlib.metadata import PackageNotFoundError, version

            with contextlib.suppress(PackageNotFoundError):
                versions[package] = version(package)
        protocol.send(
            {
                "ready": {
                    "system": args.peer,
                    "pragmas": peer.pragmas(),
                    "settings": settings,
                    "versions": versions,
                    "sqlite": sqlite3.sqlite_version,
                }
            }
        )

        def handle(command: dict[str, Any]) -> dict[str, Any]:
            timeout = float(command.get("timeout", 120))
            if command["op"] == "closed":
                return closed_loop(peer, int(command["rounds"]), int(command["in_flight"]), timeout)
            if command["op"] == "answer":
                return answer_phase(
                    peer, int(command["in_flight"]), int(command["batches"]), timeout
                )
            return {"error": f"unknown op {command['op']!r}"}

        protocol.serve(handle)
    finally:
        peer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
