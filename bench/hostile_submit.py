"""What a huge Submit costs the rest of the service: Snapshot latency of a waiting
execution while one oversized spec is refused and one large spec is accepted and run.

Starts `python -m m3grpc.cli serve` (SQLite in a temporary directory, the test
`shipping` binding, [limits] max_tools raised to --accepted-tools so the large spec
is accepted). A managed execution waits for input; a thread calls Snapshot on it
back to back. Then, one after the other:

  refused   Submit with --refused-tools tool entries (over the limit): INVALID_ARGUMENT;
  accepted  Submit with --accepted-tools entries; the worker runs it to its end
            (de-duplicating the selection, then failing on the first unknown tool).

Reported per phase: the Submit's latency (and its status), the Snapshot calls made
meanwhile with p50 and max latency. Finally the waiting execution is answered and its
outcome printed. Nothing is asserted.

    python bench/hostile_submit.py [--refused-tools 170000] [--accepted-tools 100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import grpc  # noqa: E402

from m3grpc.wire.gen.m3.v1 import execution_pb2, execution_service_pb2  # noqa: E402
from tests.api.conftest import ServerProcess, Stubs, write_config  # noqa: E402


class SnapshotProbe:
    """Snapshot calls back to back from a thread; latencies per phase."""

    def __init__(self, stubs: Stubs, execution_id: str) -> None:
        self._stubs = stubs
        self._request = execution_service_pb2.SnapshotRequest(execution_id=execution_id)
        self._samples: list[float] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                self._stubs.executions.Snapshot(self._request, timeout=120)
            except grpc.RpcError:
                continue
            with self._lock:
                self._samples.append(time.perf_counter() - started)

    def take(self) -> list[float]:
        with self._lock:
            samples, self._samples = self._samples, []
        return samples

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=130)


def _agent(tools: int) -> execution_pb2.AgentSpec:
    return execution_pb2.AgentSpec(
        harness="scripted",
        server="shipping",
        tools=[f"shipping:t{index}" for index in range(tools)],
        prompt="Call every tool.",
    )


def _phase(stubs: Stubs, probe: SnapshotProbe, tools: int, *, run: bool) -> dict[str, Any]:
    request = execution_service_pb2.SubmitRequest(agent=_agent(tools))
    probe.take()
    started = time.perf_counter()
    status = "OK"
    execution_id = ""
    try:
        execution_id = stubs.executions.Submit(request, timeout=300).execution_id
    except grpc.RpcError as error:
        status = error.code().name
    submit_seconds = time.perf_counter() - started
    outcome = None
    if run and execution_id:
        result = stubs.executions.Result(
            execution_service_pb2.ResultRequest(execution_id=execution_id), timeout=300
        ).result
        outcome = execution_pb2.ExecutionOutcome.Name(result.outcome)
    samples = probe.take()
    return {
        "tools": tools,
        "request_bytes": request.ByteSize(),
        "submit_status": status,
        "submit_seconds": round(submit_seconds, 4),
        "execution_outcome": outcome,
        "phase_seconds": round(time.perf_counter() - started, 4),
        "snapshots": len(samples),
        "snapshot_p50_ms": round(statistics.median(samples) * 1000, 2) if samples else None,
        "snapshot_max_ms": round(max(samples) * 1000, 2) if samples else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refused-tools", type=int, default=170_000)
    parser.add_argument("--accepted-tools", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="m3-bench-hostile-") as tmp:
        directory = Path(tmp)
        config = write_config(directory / "m3.toml", directory / "m3.sqlite", lease_seconds=5.0)
        with config.open("a") as out:
            out.write(f"[limits]\nmax_tools = {args.accepted_tools}\nmax_spec_bytes = 10000000\n")
        server = ServerProcess(config, directory / "server.log").start()
        stubs = server.stubs()
        try:
            waiting = stubs.submit_managed()
            pending = stubs.wait_pending(waiting)
            probe = SnapshotProbe(stubs, waiting)
            probe.start()
            time.sleep(1.0)
            baseline = probe.take()
            phases = {
                "refused": _phase(stubs, probe, args.refused_tools, run=False),
                "accepted": _phase(stubs, probe, args.accepted_tools, run=True),
            }
            probe.stop()
            stubs.respond(pending.round_id, f"address-{pending.round_id}")
            result = stubs.result(waiting)
            report = {
                "baseline_snapshot_p50_ms": round(statistics.median(baseline) * 1000, 2),
                "baseline_snapshot_max_ms": round(max(baseline) * 1000, 2),
                "phases": phases,
                "waiting_execution_outcome": execution_pb2.ExecutionOutcome.Name(result.outcome),
            }
        finally:
            stubs.close()
            server.terminate()
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"baseline Snapshot p50 {report['baseline_snapshot_p50_ms']} ms, "
        f"max {report['baseline_snapshot_max_ms']} ms"
    )
    for name, phase in phases.items():
        print(
            f"{name:9} {phase['tools']:>7} tools ({phase['request_bytes']} bytes): Submit "
            f"{phase['submit_status']} in {phase['submit_seconds']} s, outcome "
            f"{phase['execution_outcome']}; {phase['snapshots']} Snapshots meanwhile, "
            f"p50 {phase['snapshot_p50_ms']} ms, max {phase['snapshot_max_ms']} ms"
        )
    print(f"waiting execution afterwards: {report['waiting_execution_outcome']}")


if __name__ == "__main__":
    main()
