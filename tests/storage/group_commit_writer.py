"""A process of many writer threads on one SQLite file (see test_group_commit).

    python3 -m tests.storage.group_commit_writer DATABASE THREADS

Each thread inserts rows into `acked` (id = thread * 1,000,000 + n), one write
transaction per row, and prints `ack <id>` once `write_transaction` returned:
the write was acknowledged. The test SIGKILLs the process mid-stream and checks
that every printed id is in the file.
"""

from __future__ import annotations

import sys
import threading

from m3grpc.storage.engine import create_store_engine, write_transaction


def main(database: str, threads: int) -> None:
    engine = create_store_engine(database)
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS acked (id INTEGER PRIMARY KEY)")
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
    main(sys.argv[1], int(sys.argv[2]))
