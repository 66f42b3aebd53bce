"""`m3grpc serve` as a subprocess, for the demo, the black-box tests and the benchmarks.

    service = ServeProcess(config, log=directory / "server.log").start()
    ...  # service.address is "127.0.0.1:PORT", read from the ready line
    service.stop()  # SIGTERM: graceful shutdown

It starts `python -m m3grpc.cli serve --config CONFIG --listen 127.0.0.1:0` from the
repository root, waits for the "m3grpc serving on HOST:PORT" line and stops the
service with SIGTERM. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parents[2]
READY_PREFIX = "m3grpc serving on "
METRICS_PREFIX = "m3grpc metrics on "
INBOX_PREFIX = "m3grpc inbox on "
SERVE_COMMAND = (sys.executable, "-m", "m3grpc.cli")


class ServeProcess:
    """One `m3grpc serve` subprocess on a free loopback port.

    `log`: the file its stderr goes to (appended), None: this process's stderr.
    `command`: what runs `serve` (a wrapper script with the same command line).
    `new_session`: run it in its own process group (with the stdio MCP servers it
    spawns), which `stop` kills should SIGTERM not end it in time.
    `cwd`: its working directory (default: the repository root)."""

    def __init__(
        self,
        config: Path,
        *,
        log: Path | None = None,
        args: Sequence[str] = (),
        command: Sequence[str] = SERVE_COMMAND,
        env: Mapping[str, str] | None = None,
        new_session: bool = False,
        cwd: Path = ROOT,
    ) -> None:
        self.config = config
        self.cwd = cwd
        self.log = log
        self.argv = [
            *command,
            *("serve", "--config", str(config), "--listen", "127.0.0.1:0"),
            *args,
        ]
        self.env = None if env is None else dict(env)
        self.new_session = new_session
        self.process: subprocess.Popen[str] | None = None
        self.address = ""
        # The Prometheus endpoint's URL, when it serves one (--metrics-listen).
        self.metrics_url = ""
        # The web inbox's URL, when it serves one (--inbox-listen).
        self.inbox_url = ""
        # Everything it printed on stdout so far.
        self.output: list[str] = []
        self.exit_code: int | None = None
        self.killed = False  # stop() had to kill it

    def start(self, timeout: float = 60.0) -> Self:
        """Start it and wait for its ready line; RuntimeError (the process killed) if
        it exits or prints none within `timeout` seconds."""
        with contextlib.ExitStack() as stack:
            stderr = stack.enter_context(self.log.open("a")) if self.log is not None else None
            self.process = process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                start_new_session=self.new_session,
            )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(process, lines, self.output), daemon=True).start()
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:  # it exited
                break
            if line.startswith(METRICS_PREFIX):
                self.metrics_url = line.removeprefix(METRICS_PREFIX).strip()
            if line.startswith(INBOX_PREFIX):
                self.inbox_url = line.removeprefix(INBOX_PREFIX).strip()
            if line.startswith(READY_PREFIX):
                self.address = line.removeprefix(READY_PREFIX).strip()
                return self
        self.kill()
        raise RuntimeError(f"m3grpc serve did not start:\n{self.log_tail()}")

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM: graceful shutdown; returns the exit code."""
        assert self.process is not None, "not started"
        self.process.send_signal(signal.SIGTERM)
        self.exit_code = self.process.wait(timeout=timeout)
        return self.exit_code

    def stop(self, grace: float = 60.0) -> int | None:
        """SIGTERM, wait up to `grace` seconds for the graceful shutdown, then kill it
        (with its process group when it has its own). Returns the exit code; safe to
        call more than once, and before `start`."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.killed = True
                self.kill()
        if self.new_session:
            # Anything it left in its group (stdio MCP servers of a killed service).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        self.exit_code = process.returncode
        return self.exit_code

    def kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if self.new_session:
                    os.killpg(process.pid, signal.SIGKILL)  # the group created for it
                else:
                    process.kill()
            process.wait(timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        if self.log is None:
            return "(stderr not captured)"
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _pump(
    process: subprocess.Popen[str], lines: queue.Queue[str | None], output: list[str]
) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line)
        lines.put(line)
    lines.put(None)
