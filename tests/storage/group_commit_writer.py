"""A process of many writer threads on one SQLite file (see test_group_commit).

    python3 -m tests.storage.group_commit_writer DATABASE THREADS [loop]

With `loop`, the writers are tasks of one event loop instead, their writes run in
greenlets on the loop's thread (as a SQLite runtime's store calls do), each
committed by the group commit's thread. Each thread (or task) inserts rows into
`acked` (id = thread * 1,000,000 + n), one write transaction per row, and prints
`ack <id>` once its write returned: the write was acknowledged. The test SIGKILLs
the process mid-stream and checks that every printed id is in the file.
"""

from __future__ import annotations

import asyncio
import sys
import threading

from m3grpc.runtime.offload import offload, store_calls_on_loop
from m3grpc.storage.engine import write_transaction
from m3grpc.storage.store_engine import create_store_engine


def insert(engine: object, row_id: int) -> None:
    with write_transaction(engine) as conn:  # type: ignore[arg-type]
        conn.exec_driver_sql("INSERT INTO acked (id) VALUES (?)", (row_id,))


async def loop_writers(engine: object, tasks: int) -> None:
    async def write_forever(task: int) -> None:
        n = 0
        while True:
            row_id = task * 1_000_000 + n
            await offload(insert, engine, row_id)
            print(f"ack {row_id}", flush=True)
            n += 1

    with store_calls_on_loop(True):
        print("started", flush=True)
        await asyncio.gather(*(write_forever(task) for task in range(tasks)))


def main(database: str, threads: int, on_loop: bool = False) -> None:
    engine = create_store_engine(database)
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS acked (id INTEGER PRIMARY KEY)")
    if on_loop:
        asyncio.run(loop_writers(engine, threads))
        return
    printing = threading.Lock()

    def write_forever(thread: int) -> None:
        n = 0
        while True:
            row_id = thread * 1_000_000 + n
            with write_transaction(engine) as conn:
                conn.exec_driver_sql("INSERT INTO acked (id) VALUES (?)", (row_id,))
            with printing:
                print(f"ack {row_id}", flush=True)
            n += 1

    print("started", flush=True)
    for thread in range(threads):
        threading.Thread(target=write_forever, args=(thread,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["loop"])
