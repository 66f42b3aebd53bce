"""Kill the worker process (SIGKILL) while a round is pending, restart, and see
recovery fail it closed: never pending again, late responses refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from m3grpc import (
    ElicitationResponse,
    ManagedInputRecoveryError,
    ManagedInputStateError,
    MCPTestKit,
)
from m3grpc.storage import RECOVERY_FAILURE_CODE, SQLiteExecutionStore
from m3grpc.types import ExecutionOutcome, ExecutionStatus, ManagedInputStatus
from tests.runtime.conftest import eventually

WORKER = Path(__file__).with_name("worker_process.py")
REPO = Path(__file__).parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is not running; only its parent (gone) could reap it.
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split()[2] != "Z"


def test_sigkill_while_pending_then_recovery_fails_closed(tmp_path: Path) -> None:
    database = tmp_path / "executions.sqlite"
    server_pid_file = tmp_path / "server.pid"
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(database), str(server_pid_file)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line, "the worker process exited before a round was pending"
        ids = json.loads(line)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    # The orphaned stdio MCP server sees its stdin close and exits.
    server_pid = int(server_pid_file.read_text())
    eventually(
        lambda: True if not _alive(server_pid) else None,
        timeout=30,
        what="the orphaned MCP server to exit",
    )

    store = SQLiteExecutionStore(database)
    try:
        rounds = store.managed_input_store
        assert rounds.get_round(ids["round_id"]).status is ManagedInputStatus.PENDING
        with MCPTestKit(store=store, lease_seconds=1.0, poll_interval=0.1):
            state = eventually(
                lambda: (
                    s
                    if (s := store.get_state(ids["execution_id"])).lifecycle
                    is ExecutionStatus.FINISHED
                    else None
                ),
                timeout=30,
                what="recovery to finish the execution",
            )
        assert state.outcome is ExecutionOutcome.FAILED
        assert state.failure_code == RECOVERY_FAILURE_CODE
        record = rounds.get_round(ids["round_id"])
        assert record.status is ManagedInputStatus.FAILED
        assert record.failure_code == RECOVERY_FAILURE_CODE
        result = store.get_result(ids["execution_id"])
        assert result is not None and result.outcome is ExecutionOutcome.FAILED
        # A late response cannot resume it, and a replacement worker cannot claim it.
        with pytest.raises(ManagedInputRecoveryError):
            rounds.submit_responses(
                ids["round_id"],
                {
                    "shipping_address": ElicitationResponse(
                        action="accept", content={"street": "1 Main Street", "city": "Pune"}
                    )
                },
                idempotency_key="late",
            )
        with pytest.raises(ManagedInputStateError):
            rounds.claim_round(
                ids["round_id"], owner_id="replacement", lease_duration=timedelta(seconds=30)
            )
        assert rounds.list_rounds(statuses=[ManagedInputStatus.PENDING]) == []
    finally:
        store.close()

    # Reopening again keeps the terminal result.
    reopened = SQLiteExecutionStore(database)
    try:
        assert reopened.get_state(ids["execution_id"]).outcome is ExecutionOutcome.FAILED
    finally:
        reopened.close()
