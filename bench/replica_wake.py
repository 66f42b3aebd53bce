"""Cross-replica answer -> resume latency: two `m3grpc serve` replicas on one PostgreSQL.

Replica `owner` runs the executions (worker pool 2); replica `front` has no workers and
takes the answers. Per round, one at a time: Submit through the owner (scripted
AgentSpec, stdio `shipping:book_shipment`, legacy, MANAGED), wait (untimed) until the
round is pending, then Respond through the front and call Result there. Measured:

- **answer stored -> resumed**: the round's `delivery_start_time` (committed by the
  owner's worker once it has woken and taken the answer) minus its
  `response_validate_time` (committed by the front's Respond); the servers' own
  timestamps, one machine's clock;
- **answer -> result**: Respond sent -> Result returned through the front (the
  owner's finish has to reach the front too).

Both replicas use the default polling intervals (workers 0.5 s, WatchPending 0.15 s,
and 10 s while LISTEN/NOTIFY is heard). `--source DIR` runs the replicas from another
checkout of M3 (e.g. the code before LISTEN/NOTIFY, exported with `git archive`), so
before and after are measured by the same script:

    export M3_TEST_POSTGRES_URL=$(M3_PG_PORT=55432 bash scripts/start-postgres.sh)
    python3 bench/replica_wake.py --rounds 40
    git archive BASE | tar -x -C /tmp/m3-before
    python3 bench/replica_wake.py --source /tmp/m3-before

Each run gets a fresh database on that server (dropped afterwards); both replicas are
stopped however the run ends. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import grpc  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from compare_common import abort_on_signals  # noqa: E402

from m3grpc.devtools.serve_process import ServeProcess  # noqa: E402
from m3grpc.wire.gen.m3.v1 import (  # noqa: E402
    elicitation_pb2,
    elicitation_service_pb2,
    elicitation_service_pb2_grpc,
    execution_pb2,
    execution_service_pb2,
    execution_service_pb2_grpc,
)

SHIPPING = REPO_ROOT / "tests" / "mcp_servers" / "shipping.py"
ADDRESS = {"street": "1 Main Street", "city": "Pune"}
ABORT = threading.Event()


class Stubs:
    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.executions = execution_service_pb2_grpc.ExecutionServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.elicitation = elicitation_service_pb2_grpc.ElicitationServiceStub(self.channel)  # type: ignore[no-untyped-call]


def write_config(path: Path, database: str, pool_size: int) -> Path:
    lines = [
        f"database = {json.dumps(database)}",
        "shutdown_grace_seconds = 5.0",
        "[workers]",
        f"pool_size = {pool_size}",
        "[servers.shipping]",
        f"command = {json.dumps(sys.executable)}",
        f"args = {json.dumps([str(SHIPPING), '--variant', 'legacy'])}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def fresh_database(server_url: str) -> tuple[str, str]:
    """(URL of a new empty database on the server, its name)."""
    name = f"m3_bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    url = sa.make_url(server_url).set(database=name).render_as_string(hide_password=False)
    return url, name


def drop_database(server_url: str, name: str) -> None:
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def submit(stubs: Stubs) -> str:
    spec = execution_pb2.AgentSpec(
        harness="scripted",
        server="shipping",
        tools=["shipping:book_shipment"],
        prompt="Ask for the delivery address, then book the shipment.",
    )
    request = execution_service_pb2.SubmitRequest(
        agent=spec, human_input=execution_pb2.HUMAN_INPUT_MANAGED
    )
    return str(stubs.executions.Submit(request, timeout=30).execution_id)


def wait_pending(stubs: Stubs, execution_id: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    request = elicitation_service_pb2.GetPendingRequest(execution_id=execution_id)
    while time.monotonic() < deadline and not ABORT.is_set():
        response = stubs.elicitation.GetPending(request, timeout=30)
        if response.HasField("round"):
            return str(response.round.round_id)
        time.sleep(0.02)
    raise TimeoutError(f"no pending round for {execution_id}")


def one_round(owner: Stubs, front: Stubs, timeout: float) -> tuple[float, float]:
    """(answer stored -> resumed, answer -> result), in seconds."""
    execution_id = submit(owner)
    round_id = wait_pending(owner, execution_id, timeout)
    response = elicitation_pb2.ElicitationResponse(action=elicitation_pb2.ELICITATION_ACTION_ACCEPT)
    response.content.update(ADDRESS)
    request = elicitation_service_pb2.RespondRequest(
        round_id=round_id, responses={"shipping_address": response}, idempotency_key="k"
    )
    sent = time.monotonic()
    front.elicitation.Respond(request, timeout=30)
    result = front.executions.Result(
        execution_service_pb2.ResultRequest(execution_id=execution_id), timeout=timeout
    ).result
    to_result = time.monotonic() - sent
    if result.outcome != execution_pb2.EXECUTION_OUTCOME_SUCCEEDED:
        raise RuntimeError(f"execution {execution_id}: {result}")
    stored = front.elicitation.GetRound(
        elicitation_service_pb2.GetRoundRequest(round_id=round_id), timeout=30
    ).round
    resumed = (
        stored.delivery_start_time.ToNanoseconds() - stored.response_validate_time.ToNanoseconds()
    ) / 1e9
    return resumed, to_result


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="per round (s)")
    parser.add_argument(
        "--source", type=Path, default=REPO_ROOT, help="the M3 checkout the replicas run"
    )
    parser.add_argument("--postgres-url", default=os.environ.get("M3_TEST_POSTGRES_URL"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if not args.postgres_url:
        parser.error("a PostgreSQL server URL: --postgres-url or M3_TEST_POSTGRES_URL")
    abort_on_signals(ABORT)

    source = args.source.resolve()
    # -P: the replicas import m3grpc from --source, not from the working directory.
    command = (sys.executable, "-P", "-m", "m3grpc.cli")
    env = {**os.environ, "PYTHONPATH": str(source)}
    url, name = fresh_database(args.postgres_url)
    replicas: list[ServeProcess] = []
    try:
        with tempfile.TemporaryDirectory(prefix="m3-replica-wake-") as tmp:
            directory = Path(tmp)
            for replica, pool in (("owner", 2), ("front", 0)):
                config = write_config(directory / f"{replica}.toml", url, pool)
                process = ServeProcess(
                    config,
                    log=directory / f"{replica}.log",
                    args=("--log-level", "info"),
                    command=command,
                    env=env,
                    new_session=True,
                )
                replicas.append(process)
                process.start()
            owner, front = (Stubs(process.address) for process in replicas)
            for _ in range(args.warmup):
                one_round(owner, front, args.timeout)
            resumed: list[float] = []
            to_result: list[float] = []
            for _ in range(args.rounds):
                if ABORT.is_set():
                    break
                a, b = one_round(owner, front, args.timeout)
                resumed.append(a)
                to_result.append(b)
            hearing = "LISTEN m3_changes: hearing" in (directory / "owner.log").read_text()
    finally:
        for process in replicas:
            process.stop(grace=15)
        drop_database(args.postgres_url, name)

    document: dict[str, Any] = {
        "source": str(source),
        "listen_notify": hearing,
        "rounds": len(resumed),
        "load_average": os.getloadavg(),
        "answer_stored_to_resumed": summary(resumed),
        "answer_to_result": summary(to_result),
    }
    print(json.dumps(document, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
