"""How many durable commits one managed execution makes, and which store call made each.

One execution = Submit -> pause once (a managed round) -> answer -> resume -> finish, run
through an `AsyncMCPTestKit` on a fresh SQLite store against bench/compare_mcp_server.py,
for both protocol generations (legacy `elicitation/create` and 2026-07-28). sqlite3's trace
callback on every connection of the store sees each transaction whole, as SQLite runs it
(`StatementTrace`): write transactions that changed rows (each a durable commit, an fsync
at `synchronous=FULL`), those that changed none (a claim finding no work: no page written)
and read transactions, each named by the store calls whose statements ran in it (joined
with "+" when several shared one group's commit).

    python bench/commits_per_round.py [--executions 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH.parent))

from compare_common import ANSWER, REQUEST_KEY, wait_until_serving  # noqa: E402

TOOLS = {"legacy": "book_legacy", "mrtr": "book_mrtr"}
PROTOCOLS = {"legacy": "legacy", "mrtr": "2026-07-28"}
_STORAGE = str(BENCH.parent / "m3grpc" / "storage")


def _store_call() -> str:
    """The outermost m3grpc.storage function on the stack: the store call running."""
    name = "?"
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(_STORAGE) and not code.co_name.startswith("<"):
            name = code.co_name
        frame = frame.f_back
    return name


class Tally:
    """Transactions as SQLite ran them, by kind and by the store calls that ran in each."""

    def __init__(self) -> None:
        self.counting = False
        self.writes: collections.Counter[str] = collections.Counter()
        self.empty: collections.Counter[str] = collections.Counter()
        self.reads: collections.Counter[str] = collections.Counter()

    def ended(self, write: bool, calls: list[str], changed: bool) -> None:
        if not self.counting:
            return
        name = "+".join(calls) or "?"
        if not write:
            self.reads[name] += 1
        else:
            (self.writes if changed else self.empty)[name] += 1


class StatementTrace:
    """One SQLite connection's statements (sqlite3's trace callback), as SQLite runs them.

    The store sends its BEGIN and its prebuilt statements straight to the driver, a
    loop's write group commits on a thread of its own, and several store calls may
    share one group's transaction: only the connection sees every transaction whole.
    BEGIN IMMEDIATE opens a write, BEGIN a read; each statement in between names the
    store call running it; COMMIT ends it, a write having changed rows or not
    (sqlite3's running count of rows changed on the connection)."""

    def __init__(self, dbapi: Any, tally: Tally) -> None:
        self._dbapi = dbapi
        self._tally = tally
        self._write: bool | None = None  # the open transaction's kind; None: none open
        self._calls: list[str] = []
        self._changes = 0

    def __call__(self, sql: str) -> None:
        head = sql.lstrip()[:20].upper()
        if head.startswith("BEGIN"):
            self._write = "IMMEDIATE" in head or "EXCLUSIVE" in head
            self._calls = []
            self._changes = self._dbapi.total_changes
        elif self._write is None:
            return
        elif head.startswith("COMMIT") or head.startswith("END"):
            changed = self._dbapi.total_changes != self._changes
            self._tally.ended(self._write, self._calls, changed)
            self._write = None
        elif head.startswith("ROLLBACK") and " TO " not in sql.upper():
            self._write = None
        else:
            call = _store_call()
            if call not in self._calls:
                self._calls.append(call)


async def one_generation(
    generation: str, url: str, executions: int, *, count: bool = True
) -> dict[str, Any]:
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    from m3grpc import AsyncMCPTestKit, ElicitationResponse, HttpServer
    from m3grpc.storage import SQLiteExecutionStore

    tally = Tally()

    def traced(dbapi: Any, _record: Any) -> None:
        dbapi.set_trace_callback(StatementTrace(dbapi, tally))

    if count:
        # On every pool (before the store's engine exists): its connections are traced
        # from their first statement, the one its writers keep checked out too.
        event.listen(Pool, "connect", traced)

    with tempfile.TemporaryDirectory() as directory:
        store = SQLiteExecutionStore(Path(directory) / "m3.sqlite")
        binding = HttpServer(name="bench", url=url, protocol=PROTOCOLS[generation])  # type: ignore[arg-type]
        answer = {REQUEST_KEY: ElicitationResponse(action="accept", content=ANSWER)}
        try:
            async with AsyncMCPTestKit(store=store, env={}, concurrency=4) as kit:
                agent = kit.agents([{"harness": "scripted", "models": []}])[0]

                async def run_one() -> None:
                    handle = await agent.submit(
                        "book it",
                        server=binding,
                        tools=[f"bench:{TOOLS[generation]}"],
                        human_input="managed",
                    )
                    pending = await handle.wait_for_pending(60)
                    assert pending is not None
                    await handle.respond_elicitation(
                        pending.round_id, answer, idempotency_key=f"a-{pending.round_id}"
                    )
                    result = await handle.result(timeout=60)
                    assert result.outcome.value == "succeeded", result

                await run_one()  # warm-up: the first MCP session, discovery
                tally.counting = True
                for _ in range(executions):
                    await run_one()
                tally.counting = False
        finally:
            store.close()
            if count:
                event.remove(Pool, "connect", traced)
    writes, empty, reads = tally.writes, tally.empty, tally.reads
    return {
        "generation": generation,
        "executions": executions,
        "write_commits_per_execution": sum(writes.values()) / executions,
        "empty_write_transactions_per_execution": sum(empty.values()) / executions,
        "read_transactions_per_execution": sum(reads.values()) / executions,
        "writes": {k: v / executions for k, v in writes.most_common()},
        "empty_writes": {k: v / executions for k, v in empty.most_common()},
        "reads": {k: v / executions for k, v in reads.most_common()},
    }


def start_mcp_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(BENCH / "compare_mcp_server.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_until_serving(url, lambda: None if process.poll() is None else "the MCP server exited")
    except RuntimeError:
        process.kill()
        raise
    return process, url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--no-count", action="store_true", help="run the executions uncounted (for a profiler)"
    )
    parser.add_argument("--generations", default="legacy,mrtr")
    args = parser.parse_args()
    process, url = start_mcp_server()
    try:
        results = [
            asyncio.run(one_generation(g, url, args.executions, count=not args.no_count))
            for g in args.generations.split(",")
        ]
    finally:
        process.terminate()
        process.wait(10)
    blind = [r["generation"] for r in results if not args.no_count and not r["writes"]]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        report(results)
    if blind:
        # Every execution stores something: a count of none means the tracing missed them.
        print(f"no write commit seen for {', '.join(blind)}: the count is broken", file=sys.stderr)
        return 1
    return 0


def report(results: list[dict[str, Any]]) -> None:
    for result in results:
        print(
            f"{result['generation']}: {result['write_commits_per_execution']:g} write commits, "
            f"{result['empty_write_transactions_per_execution']:g} write transactions that "
            f"changed nothing, {result['read_transactions_per_execution']:g} read "
            "transactions per execution"
        )
        for name, count in result["writes"].items():
            print(f"  write {count:g}  {name}")
        for name, count in result["empty_writes"].items():
            print(f"  empty {count:g}  {name}")
        for name, count in result["reads"].items():
            print(f"  read  {count:g}  {name}")


if __name__ == "__main__":
    raise SystemExit(main())
