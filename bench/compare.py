"""M3 next to LangGraph and DBOS on the same human-input round, in one run, interleaved.

    python bench/compare.py                      # 1, 16, 128 in flight; table, JSON, chart
    python bench/compare.py --smoke              # tiny counts, 1 and 2 in flight (CI)
    python bench/compare.py --scale 200          # N executions paused at once in one service

The work: pause for one answer, answer, resume, finish. For M3 it is an execution (the
scripted harness, `human_input="managed"`) calling one tool on one shared Streamable HTTP MCP
server (bench/compare_mcp_server.py) that elicits once; for the peers, a graph / workflow that
pauses once, then runs the same step after the pause. Systems, each in its own process:

- m3-embedded-legacy / m3-embedded-mrtr: `AsyncMCPTestKit` on SQLite, legacy
  `elicitation/create` or 2026-07-28 multi round-trip (bench/compare_m3.py embedded);
- m3-grpc-legacy / m3-grpc-mrtr: one `m3grpc serve` subprocess (SQLite) driven by the Python
  remote client `AsyncRemoteMCPTestKit` (bench/compare_m3.py grpc);
- langgraph, dbos: bench/compare_peers.py, in bench/.venv-bench (installed from
  bench/requirements-peers.txt by this script).

Per in-flight level, every system runs (1) N rounds from Submit with at most P at once
("from submit"), then (2) P executions brought to their pause untimed and answered together
("answering phase"). Per round: answer sent -> the code after the pause ran, and answer sent
-> result available. CPU per round (from-submit runs): the system's own processes (for gRPC:
service and client separately), and the MCP server's. Raw limits in the same run: a bare
committed SQLite transaction (WAL, synchronous=FULL), M3's store round cycle, a bare gRPC
unary call. The pragmas are read back from every side's own connections and printed.

Everything is bounded by counts and --phase-timeout; every process started is stopped by its
ID however the run ends. Nothing is asserted about speed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import queue
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO_ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(REPO_ROOT))

from compare_common import (  # noqa: E402
    abort_on_signals,
    percentile,
    process_cpu_seconds,
    process_rss_bytes,
    ratio,
    wait_until_serving,
)

from m3grpc.devtools.serve_process import ServeProcess  # noqa: E402

VENV = BENCH / ".venv-bench"
REQUIREMENTS = BENCH / "requirements-peers.txt"
RESULTS = BENCH / "results"
M3_SYSTEMS = ["m3-embedded-legacy", "m3-embedded-mrtr", "m3-grpc-legacy", "m3-grpc-mrtr"]
PEERS = ["langgraph", "dbos"]
ALL_SYSTEMS = [*M3_SYSTEMS, *PEERS]
# Set on SIGTERM / Ctrl-C: waits stop, then everything started is stopped.
ABORT = threading.Event()


def log(message: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    # This checkout's m3grpc, whatever is installed.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- processes ------------------------------------------------------------------------------


class Child:
    """A subprocess in its own session; `stop` ends it (and its group) by its ID."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *, pipe: bool) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=child_env(),
            stdin=subprocess.PIPE if pipe else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipe else self._log,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.ended = False  # its output reached end of file
        if pipe:
            threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def read(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        if self.ended:
            raise RuntimeError(f"{self.name} exited:\n{self.tail()}")
        while not ABORT.is_set():
            try:
                line = self.lines.get(timeout=min(0.5, max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{self.name}: no answer within {timeout:.0f} s") from None
                continue
            if line is None:
                self.ended = True
                raise RuntimeError(f"{self.name} exited:\n{self.tail()}")
            return line
        raise RuntimeError("the run was abandoned")

    def read_json(self, timeout: float) -> dict[str, Any]:
        while True:
            line = self.read(timeout)
            if line.strip().startswith("{"):
                document: dict[str, Any] = json.loads(line)
                return document

    def send(self, document: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(document) + "\n")
        self.process.stdin.flush()

    def request(self, document: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(document)
        return self.read_json(timeout)

    def cpu(self) -> float | None:
        return process_cpu_seconds(self.pid)

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            self._log.flush()
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        return ""

    def stop(self, grace: float = 10.0) -> None:
        process = self.process
        if process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                if process.stdin is not None:
                    process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                    process.stdin.close()
            try:
                process.wait(timeout=5)  # a worker ends by itself on "quit" / end of input
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # the session we created for it
                process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # anything it left in its group
        self._log.close()


def descendants(pid: int) -> list[int]:
    """The live descendants of process `pid` (Linux /proc), children first."""
    found: list[int] = []
    parents = [pid]
    while parents:
        parent = parents.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as listing:
                    children = [int(c) for c in listing.read().split()]
            except OSError:
                continue
            found += children
            parents += children
    return found


class Service(ServeProcess):
    """`m3grpc serve` (bench/compare_serve.py) among the processes `Processes` stops."""

    name = "m3grpc-serve"

    def cpu(self) -> float | None:
        """The service's CPU seconds, its worker processes' (`workers.processes`) included:
        a child that ended has its CPU counted nowhere (they live as long as the service)."""
        own = process_cpu_seconds(self.pid)
        if own is None:
            return None
        return own + self.workers_cpu()

    def workers_cpu(self) -> float:
        return sum(process_cpu_seconds(c) or 0.0 for c in descendants(self.pid))

    def worker_processes(self) -> list[int]:
        return descendants(self.pid)

    def tail(self, lines: int = 30) -> str:
        return self.log_tail(lines)


class Processes:
    def __init__(self) -> None:
        self.children: list[Child | Service] = []

    def start(self, name: str, argv: list[str], log_dir: Path, *, pipe: bool = True) -> Child:
        child = Child(name, argv, log_dir / f"{name}.log", pipe=pipe)
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        for child in reversed(self.children):
            try:
                child.stop()
            except Exception as exc:
                log(f"stopping {child.name}: {exc}")


def _points_at(link: str, target: Path) -> bool:
    try:
        return Path(os.readlink(link)) == target
    except OSError:
        return False


# -- the peers' virtual environment --------------------------------------------------------


def ensure_venv(python: str, timeout: float, *, install: bool) -> tuple[Path | None, str]:
    """bench/.venv-bench with the pinned peers; (its python or None, what happened)."""
    venv_python = VENV / "bin" / "python"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    marker = VENV / "requirements.sha256"
    if venv_python.exists() and marker.exists() and marker.read_text().strip() == digest:
        return venv_python, "already installed"
    if not install:
        return None, (
            "not installed; --smoke does not install them (run once without --smoke, "
            "or pass --install-peers)"
        )
    start = time.monotonic()
    log(f"installing the peers into {VENV} (requirements-peers.txt)")
    try:
        if not venv_python.exists():
            subprocess.run([python, "-m", "venv", str(VENV)], check=True, timeout=300)
        subprocess.run(
            [
                str(venv_python),
                *("-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
                *("-r", str(REQUIREMENTS)),
            ],
            check=True,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"install failed: {exc}"
    marker.write_text(digest + "\n")
    return venv_python, f"installed in {time.monotonic() - start:.0f} s"


# -- raw limits ----------------------------------------------------------------------------


def raw_limits(
    directory: Path, transactions: int, cycles: int, echo_address: str | None, calls: int
) -> dict[str, Any]:
    from store_transitions import COMMITS_PER_CYCLE, TRANSITIONS_PER_CYCLE, bench_raw, bench_store

    raw = bench_raw(directory / "raw-full.sqlite", "FULL", transactions)
    with sqlite3.connect(directory / "raw-full.sqlite") as conn:
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    store = bench_store(directory / "store-full.sqlite", "FULL", cycles)
    limits: dict[str, Any] = {
        "sqlite_commit": {
            "synchronous": "FULL",
            "journal_mode": str(journal).upper(),
            "transactions": raw.iterations,
            "per_second": raw.transactions_per_second,
            "ms": 1000 / raw.transactions_per_second,
        },
        "store_round_cycle": {
            "transitions": TRANSITIONS_PER_CYCLE,
            # The runtime's transactions for one round (bench/store_transitions.py).
            "commits": COMMITS_PER_CYCLE["runtime"],
            "cycles": store.iterations,
            "per_second": store.cycles_per_second,
            "ms": 1000 / store.cycles_per_second if store.cycles_per_second else None,
        },
    }
    limits["store_round_cycle"]["x_bare_commit"] = (
        limits["store_round_cycle"]["ms"] / limits["sqlite_commit"]["ms"]
    )
    if echo_address is not None:
        import grpc

        with grpc.insecure_channel(echo_address) as channel:
            call = channel.unary_unary("/bench.Echo/Call")
            payload = b"x" * 64
            for _ in range(50):
                call(payload, timeout=10)
            latencies = []
            start = time.perf_counter()
            for _ in range(calls):
                t0 = time.perf_counter()
                call(payload, timeout=10)
                latencies.append(time.perf_counter() - t0)
            wall = time.perf_counter() - start
        limits["grpc_unary"] = {
            "calls": calls,
            "p50_ms": (percentile(latencies, 0.5) or 0) * 1000,
            "p99_ms": (percentile(latencies, 0.99) or 0) * 1000,
            "per_second": calls / wall,
        }
    return limits


# -- measurements --------------------------------------------------------------------------


@dataclass
class Measurement:
    system: str
    phase: str  # "submit" or "answer"
    in_flight: int
    rounds: int = 0
    wall: float = 0.0
    resume: list[float] = field(default_factory=list)
    result: list[float] = field(default_factory=list)
    cpu_own: float | None = None  # seconds, the system's processes (embedded/peer: worker)
    cpu_service: float | None = None  # gRPC: the m3grpc serve process and its worker processes
    cpu_service_workers: float | None = None  # gRPC: of which its worker processes
    cpu_client: float | None = None  # gRPC: the client process
    cpu_mcp: float | None = None  # the MCP server process
    failures: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def ms(values: list[float], q: float) -> float | None:
            value = percentile(values, q)
            return None if value is None else value * 1000

        def per_round(seconds: float | None) -> float | None:
            if seconds is None or not self.rounds:
                return None
            return seconds / self.rounds * 1000

        return {
            "system": self.system,
            "phase": self.phase,
            "in_flight": self.in_flight,
            "rounds": self.rounds,
            "wall_seconds": self.wall,
            "rounds_per_second": self.rounds / self.wall if self.wall > 0 else None,
            "resume_p50_ms": ms(self.resume, 0.5),
            "resume_p99_ms": ms(self.resume, 0.99),
            "result_p50_ms": ms(self.result, 0.5),
            "result_p99_ms": ms(self.result, 0.99),
            "cpu_ms_per_round": per_round(self.cpu_own),
            "cpu_service_ms_per_round": per_round(self.cpu_service),
            "cpu_service_workers_ms_per_round": per_round(self.cpu_service_workers),
            "cpu_client_ms_per_round": per_round(self.cpu_client),
            "cpu_mcp_ms_per_round": per_round(self.cpu_mcp),
            "failures": self.failures[:10],
            "failure_count": len(self.failures),
        }


def delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


class Run:
    def __init__(self, args: argparse.Namespace, directory: Path, processes: Processes) -> None:
        self.args = args
        self.directory = directory
        self.processes = processes
        self.logs = directory / "logs"
        self.logs.mkdir()
        self.mcp: Child | None = None
        self.mcp_url = ""
        self.service: Service | None = None
        self.service_address = ""
        self.workers: dict[str, Child] = {}
        self.ready: dict[str, Any] = {}
        self.notes: list[str] = []
        self.failures: list[str] = []

    # -- setup --

    def start_mcp_server(self) -> None:
        port = free_port()
        self.mcp = self.processes.start(
            "mcp-server",
            [
                sys.executable,
                str(BENCH / "compare_mcp_server.py"),
                "--port",
                str(port),
                "--tools-ttl-ms",
                str(self.args.mcp_tools_ttl_ms),
            ],
            self.logs,
            pipe=False,
        )
        self.mcp_url = f"http://127.0.0.1:{port}/mcp"
        mcp = self.mcp

        def gone() -> str | None:
            if mcp.process.poll() is not None:
                return f"the MCP server exited:\n{mcp.tail()}"
            return "aborted" if ABORT.is_set() else None

        wait_until_serving(self.mcp_url, gone)

    def start_service(self, pool_size: int) -> None:
        config = self.directory / "m3.toml"
        database = self.directory / "service.sqlite"
        workers = [f"pool_size = {pool_size}", f"processes = {self.args.service_processes}"]
        if self.args.service_poll_seconds is not None:
            workers.append(f"poll_interval_seconds = {self.args.service_poll_seconds}")
        config.write_text(
            "\n".join(
                [
                    f"database = {json.dumps(str(database))}",
                    "shutdown_grace_seconds = 2.0",
                    "[workers]",
                    *workers,
                    "[servers.legacy]",
                    f"url = {json.dumps(self.mcp_url)}",
                    'protocol = "legacy"',
                    "[servers.mrtr]",
                    f"url = {json.dumps(self.mcp_url)}",
                    'protocol = "2026-07-28"',
                ]
            )
            + "\n"
        )
        self.pragma_file = self.directory / "service-pragmas.json"
        self.service = Service(
            config,
            log=self.logs / f"{Service.name}.log",
            command=(sys.executable, str(BENCH / "compare_serve.py")),
            env={**child_env(), "M3_BENCH_PRAGMA_FILE": str(self.pragma_file)},
            new_session=True,
        )
        self.processes.children.append(self.service)
        self.service.start(timeout=120)
        self.service_address = self.service.address
        self.await_worker_processes(database)

    def await_worker_processes(self, database: Path) -> None:
        """Wait (bounded) until the service's worker processes have the database open:
        until then the service alone claims the work."""
        assert self.service is not None
        wanted = self.args.service_processes - 1
        deadline = time.monotonic() + 120
        while wanted > 0 and time.monotonic() < deadline and not ABORT.is_set():
            opened = 0
            for pid in self.service.worker_processes():
                with contextlib.suppress(OSError):
                    fds = os.listdir(f"/proc/{pid}/fd")
                    if any(_points_at(f"/proc/{pid}/fd/{fd}", database) for fd in fds):
                        opened += 1
            if opened >= wanted:
                return
            time.sleep(0.1)
        if wanted > 0:
            raise RuntimeError(f"the service's {wanted} worker processes did not start")

    def service_pragmas(self) -> dict[str, Any]:
        try:
            pragmas: dict[str, Any] = json.loads(self.pragma_file.read_text())
        except (OSError, ValueError):
            return {}
        return {
            name: {
                "connections": entry["connections"][0],
                **{k: v for k, v in entry.items() if k != "connections"},
            }
            for name, entry in pragmas.items()
        }

    def start_worker(self, system: str, venv_python: Path | None, concurrency: int) -> None:
        self.await_worker(system, self.spawn_worker(system, venv_python, concurrency))

    def spawn_worker(self, system: str, venv_python: Path | None, concurrency: int) -> Child:
        if system.startswith("m3-embedded-"):
            generation = system.rsplit("-", 1)[1]
            argv = [
                sys.executable,
                str(BENCH / "compare_m3.py"),
                "embedded",
                *("--generation", generation, "--mcp-url", self.mcp_url),
                *("--database", str(self.directory / f"{system}.sqlite")),
                *("--concurrency", str(concurrency)),
            ]
        elif system.startswith("m3-grpc-"):
            generation = system.rsplit("-", 1)[1]
            argv = [
                sys.executable,
                str(BENCH / "compare_m3.py"),
                "grpc",
                *("--generation", generation, "--address", self.service_address),
            ]
        else:
            assert venv_python is not None
            argv = [
                str(venv_python),
                str(BENCH / "compare_peers.py"),
                system,
                *("--database", str(self.directory / f"{system}.sqlite")),
            ]
            if system == "dbos":
                argv += ["--poll-seconds", str(self.args.dbos_poll)]
            if system == "langgraph":
                argv += ["--durability", self.args.langgraph_durability]
        return self.processes.start(system, argv, self.logs)

    def await_worker(self, system: str, worker: Child) -> None:
        reply = worker.read_json(self.args.phase_timeout)
        if "ready" not in reply:
            raise RuntimeError(f"{system}: {reply}")
        self.workers[system] = worker
        self.ready[system] = reply["ready"]

    # -- one measurement --

    def measure(
        self, system: str, command: dict[str, Any], phase: str, in_flight: int
    ) -> Measurement:
        worker = self.workers[system]
        grpc = system.startswith("m3-grpc-")
        uses_mcp = system.startswith("m3-")
        service_before = self.service.cpu() if grpc and self.service else None
        workers_before = self.service.workers_cpu() if grpc and self.service else None
        mcp_before = self.mcp.cpu() if uses_mcp and self.mcp else None
        client_before = worker.cpu()
        measurement = Measurement(system, phase, in_flight)
        try:
            reply = worker.request(
                {**command, "timeout": self.args.phase_timeout}, self.args.phase_timeout + 60
            )
        except (TimeoutError, RuntimeError, OSError) as exc:  # OSError: a dead worker's pipe
            measurement.failures.append(str(exc))
            self.failures.append(f"{system} {phase} x{in_flight}: {exc}")
            return measurement
        if "error" in reply:
            measurement.failures.append(reply["error"])
            self.failures.append(f"{system} {phase} x{in_flight}: {reply['error']}")
            return measurement
        measurement.rounds = int(reply["rounds"])
        measurement.wall = float(reply["wall"])
        measurement.resume = list(reply["resume"])
        measurement.result = list(reply["result"])
        measurement.failures = list(reply["failures"])
        if reply["failure_count"]:
            self.failures.append(
                f"{system} {phase} x{in_flight}: {reply['failure_count']} failed rounds, "
                f"e.g. {reply['failures'][:1]}"
            )
        client = delta(client_before, worker.cpu())
        if grpc:
            measurement.cpu_client = client
            measurement.cpu_service = delta(
                service_before, self.service.cpu() if self.service else None
            )
            measurement.cpu_service_workers = delta(
                workers_before, self.service.workers_cpu() if self.service else None
            )
            if measurement.cpu_client is not None and measurement.cpu_service is not None:
                measurement.cpu_own = measurement.cpu_client + measurement.cpu_service
        else:
            measurement.cpu_own = client
        if uses_mcp:
            measurement.cpu_mcp = delta(mcp_before, self.mcp.cpu() if self.mcp else None)
        return measurement


# -- the comparison --------------------------------------------------------------------------


def rounds_for(args: argparse.Namespace, in_flight: int) -> int:
    return max(int(args.rounds), int(args.waves) * in_flight)


def batches_for(args: argparse.Namespace, in_flight: int) -> int:
    return max(1, int(args.answer_rounds) // in_flight)


def compare(args: argparse.Namespace, directory: Path, processes: Processes) -> dict[str, Any]:
    run = Run(args, directory, processes)
    systems = list(args.systems)
    venv_python: Path | None = None
    venv_note = "not needed"
    if any(s in PEERS for s in systems):
        # Smoke mode (CI) uses the peers only when they are installed already: the install
        # takes one to two minutes, more than the whole smoke run may.
        venv_python, venv_note = ensure_venv(
            args.python_for_venv, 900, install=not args.smoke or args.install_peers
        )
        if venv_python is None:
            if not args.smoke:
                raise RuntimeError(f"the peers' environment: {venv_note}")
            systems = [s for s in systems if s not in PEERS]
            run.notes.append(f"peers left out: {venv_note}")
    log(f"peers' environment: {venv_note}")
    levels = args.in_flight
    concurrency = max(levels) + 8
    echo = processes.start(
        "grpc-echo", [sys.executable, str(BENCH / "compare_m3.py"), "echo"], run.logs
    )
    echo_address = echo.read_json(60)["ready"]["address"]
    run.start_mcp_server()
    if any(s.startswith("m3-grpc-") for s in systems):
        run.start_service(pool_size=concurrency)
    log(f"starting {', '.join(systems)} (each runs one untimed round)")
    pending = {system: run.spawn_worker(system, venv_python, concurrency) for system in systems}
    for system, worker in pending.items():
        try:
            run.await_worker(system, worker)
        except Exception as exc:
            run.failures.append(f"{system} did not start: {exc}")
            log(f"{system} did not start: {exc}")
    log("raw limits")
    limits = raw_limits(
        directory, args.raw_transactions, args.store_cycles, echo_address, args.grpc_calls
    )
    echo.stop()
    active = [s for s in systems if s in run.workers]
    measurements: list[Measurement] = []
    for index, in_flight in enumerate(levels):
        # Interleaved: every system at this level, in a rotating order, then the next phase.
        order = active[index % len(active) :] + active[: index % len(active)] if active else []
        for phase in ("submit", "answer"):
            for system in order:
                if ABORT.is_set():
                    raise RuntimeError("the run was abandoned")
                if phase == "submit":
                    command = {
                        "op": "closed",
                        "rounds": rounds_for(args, in_flight),
                        "in_flight": in_flight,
                    }
                else:
                    command = {
                        "op": "answer",
                        "in_flight": in_flight,
                        "batches": batches_for(args, in_flight),
                    }
                log(f"{system}: {phase} phase, {in_flight} in flight")
                measurement = run.measure(system, command, phase, in_flight)
                measurements.append(measurement)
                s = measurement.summary()
                log(
                    f"  {s['rounds']} rounds, {fmt(s['rounds_per_second'])} rounds/s, "
                    f"resume p50 {fmt(s['resume_p50_ms'])} ms"
                )
    service_pragmas = run.service_pragmas() if run.service is not None else {}
    pragmas = {system: run.ready[system].get("pragmas", {}) for system in active}
    if service_pragmas:
        pragmas["m3grpc serve"] = service_pragmas
    versions: dict[str, str] = {}
    for system in active:
        versions.update(run.ready[system].get("versions", {}))
    return {
        "environment": environment(args, venv_note, versions),
        "settings": {
            "in_flight": levels,
            "rounds_from_submit": {str(p): rounds_for(args, p) for p in levels},
            "answering_phase_batches": {str(p): batches_for(args, p) for p in levels},
            "m3_worker_pool": concurrency,
            "m3_service_processes": args.service_processes,
            "m3_service_poll_interval_seconds": args.service_poll_seconds,
            "mcp_tools_list_ttl_ms": args.mcp_tools_ttl_ms,
            "langgraph_durability": args.langgraph_durability,
            "dbos_notification_listener_polling_interval_sec": args.dbos_poll,
            "phase_timeout_seconds": args.phase_timeout,
        },
        "pragmas": pragmas,
        "raw_limits": limits,
        "systems": active,
        "results": [m.summary() for m in measurements],
        "notes": run.notes,
        "failures": run.failures,
    }


def environment(
    args: argparse.Namespace, venv_note: str, versions: dict[str, str]
) -> dict[str, Any]:
    import grpc

    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "nproc": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in load],
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "grpcio": grpc.__version__,
        "platform": platform.platform(),
        "peers_venv": venv_note,
        "versions": versions,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# -- output ---------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def results_table(document: dict[str, Any]) -> str:
    header = (
        f"{'system':<19} {'phase':<7} {'P':>4} {'rounds':>6} {'rounds/s':>9} "
        f"{'resume p50':>10} {'p99':>8} {'result p50':>10} {'p99':>8} "
        f"{'CPU ms/rd':>9} {'svc':>6} {'(wrk)':>6} {'client':>6} {'MCP srv':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in document["results"]:
        lines.append(
            f"{r['system']:<19} {r['phase']:<7} {r['in_flight']:>4} {r['rounds']:>6} "
            f"{fmt(r['rounds_per_second']):>9} {fmt(r['resume_p50_ms'], 2):>10} "
            f"{fmt(r['resume_p99_ms'], 2):>8} {fmt(r['result_p50_ms'], 2):>10} "
            f"{fmt(r['result_p99_ms'], 2):>8} {fmt(r['cpu_ms_per_round']):>9} "
            f"{fmt(r['cpu_service_ms_per_round']):>6} "
            f"{fmt(r.get('cpu_service_workers_ms_per_round')):>6} "
            f"{fmt(r['cpu_client_ms_per_round']):>6} "
            f"{fmt(r['cpu_mcp_ms_per_round']):>7}"
        )
    return "\n".join(lines)


def pick(document: dict[str, Any], system: str, phase: str, in_flight: int) -> dict[str, Any]:
    for r in document["results"]:
        if r["system"] == system and r["phase"] == phase and r["in_flight"] == in_flight:
            return dict(r)
    return {}


def summary_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Per system: answer->resume median (1 in flight), rounds/s per level, CPU per round."""
    levels = document["settings"]["in_flight"]
    rows = []
    for system in document["systems"]:
        low = pick(document, system, "submit", levels[0])
        row: dict[str, Any] = {
            "system": system,
            "resume_p50_ms": low.get("resume_p50_ms"),
            "result_p50_ms": low.get("result_p50_ms"),
            "cpu_ms_per_round": low.get("cpu_ms_per_round"),
            "cpu_mcp_ms_per_round": low.get("cpu_mcp_ms_per_round"),
        }
        for p in levels:
            row[f"submit_{p}"] = pick(document, system, "submit", p).get("rounds_per_second")
            row[f"answer_{p}"] = pick(document, system, "answer", p).get("rounds_per_second")
        rows.append(row)
    return rows


def summary_table(document: dict[str, Any]) -> str:
    levels = document["settings"]["in_flight"]
    submit = "/".join(str(p) for p in levels)
    header = (
        f"{'system':<19} {'resume p50 ms':>13} {'result p50 ms':>13} "
        f"{'rounds/s from submit ' + submit:>28} {'answering phase ' + submit:>26} "
        f"{'CPU ms/rd':>9} {'MCP srv':>7}"
    )
    lines = [header, "-" * len(header)]
    for row in summary_rows(document):
        lines.append(
            f"{row['system']:<19} {fmt(row['resume_p50_ms'], 2):>13} "
            f"{fmt(row['result_p50_ms'], 2):>13} "
            f"{' / '.join(fmt(row[f'submit_{p}']) for p in levels):>28} "
            f"{' / '.join(fmt(row[f'answer_{p}']) for p in levels):>26} "
            f"{fmt(row['cpu_ms_per_round']):>9} {fmt(row['cpu_mcp_ms_per_round']):>7}"
        )
    return "\n".join(lines)


def ratio_table(document: dict[str, Any]) -> str:
    """M3 / peer, same run: rounds/s per level (>1: M3 faster), resume median (>1: M3 slower)."""
    levels = document["settings"]["in_flight"]
    rows = {row["system"]: row for row in summary_rows(document)}
    peers = [s for s in PEERS if s in rows]
    m3 = [s for s in M3_SYSTEMS if s in rows]
    if not peers or not m3:
        return "(no ratios: needs an M3 system and a peer)"
    header = (
        f"{'M3 system':<19} {'vs':<10} "
        + " ".join(f"{'rounds/s x' + str(p):>12}" for p in levels)
        + f" {'resume p50 x':>12} {'CPU/rd x':>9}"
    )
    lines = [header, "-" * len(header)]
    for system in m3:
        for peer in peers:
            a, b = rows[system], rows[peer]
            lines.append(
                f"{system:<19} {peer:<10} "
                + " ".join(
                    f"{fmt(ratio(a[f'submit_{p}'], b[f'submit_{p}']), 2):>12}" for p in levels
                )
                + f" {fmt(ratio(a['resume_p50_ms'], b['resume_p50_ms']), 1):>12}"
                + f" {fmt(ratio(a['cpu_ms_per_round'], b['cpu_ms_per_round']), 1):>9}"
            )
    return "\n".join(lines)


def print_report(document: dict[str, Any]) -> None:
    env = document["environment"]
    print(
        f"nproc {env['nproc']}, load average at end {env['load_average_at_end']}, Python "
        f"{env['python']}, SQLite {env['sqlite']}, grpcio {env['grpcio']}, {env['platform']}"
    )
    if env["versions"]:
        print("peers: " + ", ".join(f"{k} {v}" for k, v in sorted(env["versions"].items())))
    settings = document["settings"]
    poll = settings.get("m3_service_poll_interval_seconds")
    print(
        f"m3grpc serve: workers.processes = {settings.get('m3_service_processes', 1)} "
        f"(CPU: the service and its worker processes), pool_size {settings['m3_worker_pool']}"
        + ("" if poll is None else f", poll_interval_seconds {poll}")
    )
    ttl = settings.get("mcp_tools_list_ttl_ms")
    if ttl is not None:
        print(f"MCP server: tools/list marked fresh for {ttl} ms (2026-07-28 ttlMs; 0: no hint)")
    print("\nSQLite pragmas read back from each side's own connections:")
    for side, databases in document["pragmas"].items():
        for database, values in databases.items():
            print(f"  {side:<19} {database:<28} {json.dumps(values)}")
    limits = document["raw_limits"]
    commit, cycle = limits["sqlite_commit"], limits["store_round_cycle"]
    print("\nraw limits (same run):")
    print(
        f"  bare SQLite commit (WAL, synchronous=FULL, 1 INSERT): {commit['ms']:.3f} ms "
        f"({commit['per_second']:.0f}/s)"
    )
    print(
        f"  M3 store round cycle ({cycle['transitions']} transitions, "
        f"{cycle.get('commits', cycle['transitions'])} commits, FULL): {cycle['ms']:.2f} ms "
        f"({cycle['per_second']:.0f}/s) = {cycle['x_bare_commit']:.1f}x a bare commit"
    )
    if "grpc_unary" in limits:
        unary = limits["grpc_unary"]
        print(
            f"  bare gRPC unary call (grpc.aio echo, loopback, 1 in flight): p50 "
            f"{unary['p50_ms']:.3f} ms, p99 {unary['p99_ms']:.3f} ms ({unary['per_second']:.0f}/s)"
        )
    print(
        "\nper measurement (durations in ms; CPU per round in ms: own = the system's "
        "processes, for gRPC svc + client; svc includes its worker processes, (wrk)):"
    )
    print(results_table(document))
    print("\nsummary (resume/result: 1st level, from submit; CPU: 1st level):")
    print(summary_table(document))
    print(
        "\nratios M3 / peer (same run): rounds/s (>1: M3 faster); resume p50 and CPU "
        "(>1: M3 slower / costlier)"
    )
    print(ratio_table(document))
    for note in document["notes"]:
        print(f"note: {note}")
    for failure in document["failures"]:
        print(f"FAILED: {failure}")


def draw_chart(document: dict[str, Any], json_path: Path, chart: Path, python: Path | None) -> str:
    if python is None:
        return "no chart: the peers' environment (matplotlib) is missing"
    chart.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(python), str(BENCH / "compare_chart.py"), str(json_path), str(chart)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        return f"no chart: {done.stderr.strip()[-500:]}"
    return f"chart: {chart}"


# -- scale mode -------------------------------------------------------------------------------


def scale(args: argparse.Namespace, directory: Path, processes: Processes) -> dict[str, Any]:
    run = Run(args, directory, processes)
    n = args.scale
    run.start_mcp_server()
    run.start_service(pool_size=n + 8)
    system = f"m3-grpc-{args.scale_generation}"
    run.start_worker(system, None, n + 8)
    assert run.service is not None and run.mcp is not None
    worker = run.workers[system]
    rss_idle = process_rss_bytes(run.service.pid)
    mcp_rss_idle = process_rss_bytes(run.mcp.pid)
    watchers = processes.start(
        "watchers",
        [
            sys.executable,
            str(BENCH / "compare_m3.py"),
            "watchers",
            *("--address", run.service_address, "--watchers", str(args.watchers)),
            *("--expect", str(n), "--timeout", str(args.phase_timeout * 3)),
        ],
        run.logs,
    )
    watchers.read_json(60)
    log(f"scale: pausing {n} executions")
    paused = worker.request(
        {"op": "scale_pause", "count": n, "timeout": args.phase_timeout}, args.phase_timeout + 60
    )
    rss_paused = process_rss_bytes(run.service.pid)
    mcp_rss_paused = process_rss_bytes(run.mcp.pid)
    log("scale: GetPending while they wait")
    pending = worker.request(
        {"op": "scale_get_pending", "calls": args.get_pending_calls, "timeout": args.phase_timeout},
        args.phase_timeout + 60,
    )
    log("scale: answering them all at once")
    answered = worker.request(
        {"op": "scale_answer", "timeout": args.phase_timeout}, args.phase_timeout + 60
    )
    for step, reply in (("pause", paused), ("GetPending", pending), ("answer", answered)):
        if "error" in reply:
            raise RuntimeError(f"scale {step}: {reply['error']}")
    watchers.send({"op": "stop"})
    watched = watchers.read_json(60)
    watch_latencies = [x for per in watched["latencies"] for x in per]

    def ms(values: list[float], q: float) -> float | None:
        value = percentile(values, q)
        return None if value is None else value * 1000

    return {
        "environment": environment(args, "not needed", {}),
        "settings": {
            "executions": n,
            "generation": args.scale_generation,
            "watchers": args.watchers,
            "worker_pool": n + 8,
            "service_processes": args.service_processes,
        },
        "pragmas": {"m3grpc serve": run.service_pragmas()},
        "paused": {k: v for k, v in paused.items()},
        "service_rss_mb": {
            "idle_after_warmup": (rss_idle or 0) / 2**20,
            "with_all_paused": (rss_paused or 0) / 2**20,
        },
        "mcp_server_rss_mb": {
            "idle_after_warmup": (mcp_rss_idle or 0) / 2**20,
            "with_all_paused": (mcp_rss_paused or 0) / 2**20,
        },
        "get_pending": {
            "calls": len(pending["latencies"]),
            "p50_ms": ms(pending["latencies"], 0.5),
            "p99_ms": ms(pending["latencies"], 0.99),
            "failures": pending["failures"],
        },
        "answer_all": {
            "answered": answered["answered"],
            "seconds": answered["seconds"],
            "resume_p50_ms": ms(answered["resume"], 0.5),
            "resume_p99_ms": ms(answered["resume"], 0.99),
            "result_p50_ms": ms(answered["result"], 0.5),
            "result_p99_ms": ms(answered["result"], 0.99),
            "failures": answered["failures"],
            "failure_count": answered["failure_count"],
        },
        "watch": {
            "subscribers": args.watchers,
            "events_per_subscriber": watched["counts"],
            "creation_to_subscriber_p50_ms": ms(watch_latencies, 0.5),
            "creation_to_subscriber_p99_ms": ms(watch_latencies, 0.99),
            "creation_to_subscriber_max_ms": ms(watch_latencies, 1.0),
        },
    }


def print_scale(document: dict[str, Any]) -> None:
    env, s = document["environment"], document["settings"]
    print(
        f"nproc {env['nproc']}, load average at end {env['load_average_at_end']}, Python "
        f"{env['python']}, SQLite {env['sqlite']}"
    )
    print(
        f"scale: {s['executions']} executions ({s['generation']}) paused at once in one "
        f"m3grpc serve (worker pool {s['worker_pool']}), one HTTP MCP server, "
        f"{s['watchers']} WatchPending subscribers"
    )
    print(f"pragmas (service): {json.dumps(document['pragmas'])}")
    p = document["paused"]
    print(f"  paused {p['paused']}/{s['executions']} in {p['seconds']:.1f} s (submit 32 at a time)")
    rss, mcp = document["service_rss_mb"], document["mcp_server_rss_mb"]
    print(
        f"  service RSS: {rss['idle_after_warmup']:.0f} MB idle -> "
        f"{rss['with_all_paused']:.0f} MB with all paused; MCP server "
        f"{mcp['idle_after_warmup']:.0f} -> {mcp['with_all_paused']:.0f} MB"
    )
    g = document["get_pending"]
    print(
        f"  GetPending while they wait: p50 {fmt(g['p50_ms'], 2)} ms, p99 "
        f"{fmt(g['p99_ms'], 2)} ms ({g['calls']} calls, one at a time)"
    )
    a = document["answer_all"]
    print(
        f"  answering all at once: {a['answered']} answered in {a['seconds']:.1f} s; "
        f"answer->resume p50 {fmt(a['resume_p50_ms'])} ms p99 {fmt(a['resume_p99_ms'])} ms; "
        f"answer->result p50 {fmt(a['result_p50_ms'])} ms p99 {fmt(a['result_p99_ms'])} ms"
    )
    w = document["watch"]
    print(
        f"  round created -> each of {w['subscribers']} WatchPending subscribers: p50 "
        f"{fmt(w['creation_to_subscriber_p50_ms'], 2)} ms, p99 "
        f"{fmt(w['creation_to_subscriber_p99_ms'], 2)} ms, max "
        f"{fmt(w['creation_to_subscriber_max_ms'], 2)} ms "
        f"(events seen per subscriber: {w['events_per_subscriber']})"
    )
    for failure in [*p["failures"], *g["failures"], *a["failures"]]:
        print(f"FAILED: {failure}")


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny counts, 1 and 2 in flight; no chart unless --chart",
    )
    parser.add_argument(
        "--in-flight",
        type=lambda s: [int(x) for x in s.split(",")],
        default=None,
        help="levels, comma-separated (1,16,128)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds from submit per system and level, at least (24)",
    )
    parser.add_argument(
        "--waves", type=int, default=None, help="... and at least WAVES x the level (1)"
    )
    parser.add_argument(
        "--answer-rounds",
        type=int,
        default=None,
        help="answering phase: batches of P, about this many rounds (16)",
    )
    parser.add_argument(
        "--systems",
        type=lambda s: s.split(","),
        default=ALL_SYSTEMS,
        help=f"comma-separated subset of {','.join(ALL_SYSTEMS)}",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--chart",
        type=Path,
        default=None,
        help="chart image (default bench/results/compare.png; none with --smoke)",
    )
    parser.add_argument(
        "--phase-timeout",
        type=float,
        default=None,
        help="bound of every measurement, s (180; smoke 60)",
    )
    parser.add_argument(
        "--dbos-poll",
        type=float,
        default=0.01,
        help="DBOS notification_listener_polling_interval_sec (0.01)",
    )
    parser.add_argument("--langgraph-durability", default="sync", choices=["sync", "async", "exit"])
    parser.add_argument("--raw-transactions", type=int, default=None)
    parser.add_argument("--store-cycles", type=int, default=None)
    parser.add_argument("--grpc-calls", type=int, default=None)
    parser.add_argument(
        "--install-peers",
        action="store_true",
        help="with --smoke: install the peers if missing (without --smoke they always are)",
    )
    parser.add_argument(
        "--python-for-venv",
        default=sys.executable,
        help="interpreter that creates bench/.venv-bench",
    )
    parser.add_argument(
        "--scale", type=int, default=0, help="instead: N executions paused at once in one service"
    )
    parser.add_argument("--scale-generation", default="legacy", choices=["legacy", "mrtr"])
    parser.add_argument(
        "--watchers", type=int, default=50, help="scale mode: WatchPending subscribers (50)"
    )
    parser.add_argument("--get-pending-calls", type=int, default=200)
    parser.add_argument(
        "--service-processes",
        type=int,
        default=1,
        help="m3grpc serve's workers.processes (1): N - 1 worker processes beside it",
    )
    parser.add_argument(
        "--mcp-tools-ttl-ms",
        type=int,
        default=60_000,
        help="the MCP server's 2026-07-28 tools/list ttlMs (60000; 0: no hint, so every "
        "2026-07-28 execution lists the tools)",
    )
    parser.add_argument(
        "--service-poll-seconds",
        type=float,
        default=None,
        help="m3grpc serve's workers.poll_interval_seconds (default: the service's)",
    )
    parser.add_argument(
        "--keep-logs", type=Path, default=None, help="copy every process's log to this directory"
    )
    args = parser.parse_args(argv)
    smoke = args.smoke
    defaults = {
        "in_flight": [1, 2] if smoke else [1, 16, 128],
        "rounds": 3 if smoke else 24,
        "waves": 1,
        "answer_rounds": 2 if smoke else 16,
        "phase_timeout": 60.0 if smoke else 180.0,
        "raw_transactions": 100 if smoke else 1500,
        "store_cycles": 10 if smoke else 300,
        "grpc_calls": 100 if smoke else 2000,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    unknown = [s for s in args.systems if s not in ALL_SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {ALL_SYSTEMS}")
    if (
        min(args.in_flight) < 1
        or args.rounds < 1
        or args.phase_timeout <= 0
        or args.service_processes < 1
    ):
        parser.error("levels and counts must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    abort_on_signals(ABORT)
    directory = Path(tempfile.mkdtemp(prefix="m3-compare-"))
    processes = Processes()
    started = time.monotonic()
    try:
        if args.scale:
            document = scale(args, directory, processes)
        else:
            document = compare(args, directory, processes)
    except BaseException as exc:
        log(f"stopped: {type(exc).__name__}: {exc}")
        for child in processes.children:
            tail = child.tail(15)
            if tail:
                log(f"--- {child.name} log tail ---\n{tail}")
        raise
    finally:
        processes.stop_all()
        if args.keep_logs is not None:
            shutil.copytree(directory / "logs", args.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(directory, ignore_errors=True)
    document["environment"]["seconds"] = round(time.monotonic() - started, 1)
    if args.scale:
        print_scale(document)
        failed = bool(document["answer_all"]["failure_count"] or document["paused"]["failures"])
    else:
        print_report(document)
        failed = bool(document["failures"])
    json_path = args.json
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(document, indent=2) + "\n")
        print(f"json: {json_path}")
    chart = args.chart or (None if args.smoke or args.scale else RESULTS / "compare.png")
    if chart is not None and not args.scale:
        source = json_path
        if source is None:
            source = Path(tempfile.mkstemp(prefix="m3-compare-", suffix=".json")[1])
            source.write_text(json.dumps(document))
        try:
            python = VENV / "bin" / "python"
            print(draw_chart(document, source, chart, python if python.exists() else None))
        finally:
            if json_path is None:
                source.unlink(missing_ok=True)
    print(f"total {document['environment']['seconds']} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
