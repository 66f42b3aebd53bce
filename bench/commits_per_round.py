"""How many durable commits one managed execution makes, and which store call made each.

One execution = Submit -> pause once (a managed round) -> answer -> resume -> finish, run
through an `AsyncMCPTestKit` on a fresh SQLite store against bench/compare_mcp_server.py,
for both protocol generations (legacy `elicitation/create` and 2026-07-28). An SQLAlchemy
`commit` listener on the store's engine sees every commit, and the store's own commit
listener (`add_commit_listener`, called after each committed write transaction) tells the
writes from the reads: it counts the write transactions that changed rows, those that
changed none (a claim finding no work: no page written) and read transactions apart, and
names the store call that made each.

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
import threading
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH.parent))

from compare_common import ANSWER, REQUEST_KEY, wait_until_serving  # noqa: E402

TOOLS = {"legacy": "book_legacy", "mrtr": "book_mrtr"}
PROTOCOLS = {"legacy": "legacy", "mrtr": "2026-07-28"}
_STORAGE = str(BENCH.parent / "m3grpc" / "storage")


def _store_call() -> str:
    """The outermost m3grpc.storage function on the stack: the store call committing."""
    name = "?"
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(_STORAGE) and not code.co_name.startswith("<"):
            name = code.co_name
        frame = frame.f_back
    return name


async def one_generation(
    generation: str, url: str, executions: int, *, count: bool = True
) -> dict[str, Any]:
    from sqlalchemy import event

    from m3grpc import AsyncMCPTestKit, ElicitationResponse, HttpServer
    from m3grpc.storage import SQLiteExecutionStore

    writes: collections.Counter[str] = collections.Counter()
    empty: collections.Counter[str] = collections.Counter()
    reads: collections.Counter[str] = collections.Counter()
    changes_seen: dict[int, int] = {}
    counting = False
    # The commit SQLAlchemy is about to make on this thread: (store call, rows changed).
    committing = threading.local()

    def on_commit(conn: Any) -> None:
        # Every commit, read or write, before it happens; counted as a read until
        # the store's listener says it was a write. sqlite3's running count of rows
        # changed on this connection: a write transaction that changed none (a claim
        # finding no work) wrote nothing.
        dbapi = conn.connection.dbapi_connection
        changes = dbapi.total_changes
        changed = changes != changes_seen.get(id(dbapi), 0)
        changes_seen[id(dbapi)] = changes
        committing.last = None
        if not counting:
            return
        call = _store_call()
        committing.last = (call, changed)
        reads[call] += 1

    def on_write_committed() -> None:
        # The store's listener: right after a write transaction's commit, on its thread.
        last, committing.last = getattr(committing, "last", None), None
        if last is None:
            return
        call, changed = last
        reads[call] -= 1
        (writes if changed else empty)[call] += 1

    with tempfile.TemporaryDirectory() as directory:
        store = SQLiteExecutionStore(Path(directory) / "m3.sqlite")
        if count:
            event.listen(store._engine, "commit", on_commit)
            store.add_commit_listener(on_write_committed)
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
                counting = True
                for _ in range(executions):
                    await run_one()
                counting = False
        finally:
            store.close()
    return {
        "generation": generation,
        "executions": executions,
        "write_commits_per_execution": sum(writes.values()) / executions,
        "empty_write_transactions_per_execution": sum(empty.values()) / executions,
        "read_transactions_per_execution": sum((+reads).values()) / executions,
        "writes": {k: v / executions for k, v in writes.most_common()},
        "empty_writes": {k: v / executions for k, v in empty.most_common()},
        "reads": {k: v / executions for k, v in (+reads).most_common()},
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
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
