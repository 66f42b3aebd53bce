"""`workers.processes = N`: N - 1 worker-only processes beside `m3grpc serve`.

One process runs one event loop, so its executions, RPCs and store calls share one
core. The store already lets several processes share one database (claims, leases
and recovery go through it), so the service starts N - 1 more processes of workers
on the same configuration: each claims queued executions like a replica without a
gRPC listener, and the service's recovery (or theirs) takes over the executions of
one that dies. Each child is linked to the service by a Unix socket pair
(m3grpc/runtime/local_wakes.py): every process tells the others what its commits
changed, so a Respond the service accepts wakes the child that owns the round at
once, a child's new pending round wakes GetPending and WatchPending on the
service at once, and so do Submits, finishes and cancels; polling
(`workers.poll_interval_seconds`) stays the fallback.

Each child runs `python -m m3grpc.api.worker_processes --config PATH --wake-fd N`
(N: its end of the link); it stops gracefully on SIGTERM (the service sends it at
shutdown) and when its stdin closes (the service is gone, however it ended).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from m3grpc.api import process_memory

if TYPE_CHECKING:
    from m3grpc.api.config import ServiceConfig

log = logging.getLogger(__name__)

MODULE = "m3grpc.api.worker_processes"


class WorkerProcesses:
    """The service's worker-only child processes."""

    def __init__(self, processes: Sequence[subprocess.Popen[bytes]]) -> None:
        self.processes = list(processes)

    @classmethod
    def start(
        cls, config: ServiceConfig, config_path: str | None, log_args: Sequence[str] = ()
    ) -> WorkerProcesses:
        extra = config.workers.processes - 1
        if extra <= 0:
            return cls([])
        from m3grpc.runtime.local_wakes import HUB, link_pair

        if config_path is None:
            raise ValueError("workers.processes > 1 needs a configuration file")
        argv = [sys.executable, "-m", MODULE, "--config", config_path, *log_args]
        children = []
        links = []
        for _ in range(extra):
            ours, theirs = link_pair()
            try:
                children.append(
                    subprocess.Popen(
                        [*argv, "--wake-fd", str(theirs.fileno())],
                        stdin=subprocess.PIPE,
                        pass_fds=(theirs.fileno(),),
                    )
                )
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()  # the child has its copy: its exit ends the link
            links.append(ours)
        # On the service's loop (serve() calls this there): its runtime is attached.
        HUB.connect(links)
        for child in children:
            log.info(
                "worker process %s started",
                child.pid,
                extra={"event": "workers.process_started", "pid": child.pid},
            )
        return cls(children)

    def stop(self, grace: float) -> None:
        """SIGTERM every child; wait `grace` (and a little) for them, then SIGKILL."""
        for child in self.processes:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.processes:
            try:
                child.wait(grace + 5.0)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdin is not None:
                child.stdin.close()


async def run_workers(config: ServiceConfig, wake_fd: int | None = None) -> None:
    """Run this process's worker pool until SIGTERM/SIGINT or stdin closes;
    `wake_fd`: this process's end of its link to the service."""
    from m3grpc.runtime import Runtime, SqlExecutionStore, default_harnesses, load_cipher
    from m3grpc.runtime.local_wakes import HUB

    # The same keys as the service (its environment is inherited): answers it sealed open here.
    store = SqlExecutionStore(config.database, cipher=load_cipher(config.encryption.key_file))
    runtime = Runtime(
        store,
        settings=config.workers.settings(),
        harnesses=default_harnesses(
            codex=config.codex.settings(), claude_code=config.claude_code.settings()
        ),
        limits=config.runtime_limits(),
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    stdin = sys.stdin.fileno()

    def parent_gone() -> None:
        # The descriptor, not sys.stdin's buffered reader: a daemon thread blocked in
        # the reader holds its lock, and the interpreter's shutdown then aborts the
        # process ("could not acquire lock for <stdin> at interpreter shutdown").
        with contextlib.suppress(OSError):
            while os.read(stdin, 4096):
                pass
        with contextlib.suppress(RuntimeError):  # the loop closed first: stopping anyway
            loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=parent_gone, daemon=True, name="m3-parent-watch").start()
    try:
        await runtime.start()
        if wake_fd is not None:
            HUB.connect([socket.socket(fileno=wake_fd)])
        process_memory.freeze_startup_objects()
        process_memory.collect_less_often()
        await stop.wait()
    finally:
        await runtime.stop(config.shutdown_grace_seconds)
        HUB.close()
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE, description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--log-format", default="text", choices=["text", "json"])
    parser.add_argument("--wake-fd", type=int, default=None)
    args = parser.parse_args(argv)
    # As `m3grpc serve` does, before the threads and the libraries: the runtime and
    # the config (which names it) are imported only after this.
    process_memory.limit_malloc_arenas()
    process_memory.skip_trio()
    from m3grpc.api.config import load_config
    from m3grpc.api.logs import configure_logging

    configure_logging(args.log_level, args.log_format)
    asyncio.run(run_workers(load_config(args.config), args.wake_fd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
