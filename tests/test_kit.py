"""The sync kit's own event loop (m3grpc/kit.py): what is left on it at exit ends as
under `asyncio.run`, so that nothing it started (a store write among it) is cut off
halfway with the loop closed under it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from m3grpc import MCPTestKit
from m3grpc.storage import SQLiteExecutionStore


def test_tasks_left_on_the_kits_loop_are_cancelled_and_run_to_their_end_at_exit(
    tmp_path: Path,
) -> None:
    store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
    cancelled, finished_cleanup = threading.Event(), threading.Event()

    async def left_running() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finally:
            await asyncio.sleep(0.01)  # its clean-up still waits on the loop
            finished_cleanup.set()

    async def start() -> None:
        asyncio.get_running_loop().create_task(left_running())

    try:
        with MCPTestKit(store=store, env={}) as kit:
            kit._loop_thread().run(start())
        assert cancelled.is_set() and finished_cleanup.is_set()
    finally:
        store.close()
