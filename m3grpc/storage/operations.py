"""Finished operations' results, stored as each operation finishes.

Written inside the caller's transaction (the one that resolves or fails the
operation's round, or one of its own), so a worker that disappears after a
tool returned never loses what it returned: recovery finishes the execution
with these results.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from m3grpc.storage.schema import operation_results
from m3grpc.storage.statements import (
    INSERT_OPERATION_RESULT,
    INSERT_OPERATION_RESULT_ONCE,
    SELECT_OPERATION_STORED,
)
from m3grpc.types import ExecutionOutcome, OperationResult


def record_operation(
    conn: Connection, execution_id: str, result: OperationResult, *, last: bool, now: datetime
) -> None:
    """Store `result` once per operation; `last` marks the execution's final operation.
    A repeated report of the same operation changes nothing."""
    row = {
        "execution_id": execution_id,
        "logical_operation_id": result.logical_operation_id,
        "result": result.model_dump(mode="json"),
        "last": last,
        "recorded_at": now,
    }
    if conn.dialect.name == "sqlite":
        INSERT_OPERATION_RESULT_ONCE.execute(conn, row)
        return
    exists = SELECT_OPERATION_STORED.first(
        conn,
        {"execution_id": execution_id, "logical_operation_id": result.logical_operation_id},
    )
    if exists is None:
        INSERT_OPERATION_RESULT.execute(conn, row)


def stored_operations(conn: Connection, execution_id: str) -> tuple[list[OperationResult], bool]:
    """The execution's stored results in the order they finished, and whether the
    final one was stored (every operation completed)."""
    rows = conn.execute(
        sa.select(operation_results.c.result, operation_results.c.last)
        .where(operation_results.c.execution_id == execution_id)
        .order_by(operation_results.c.seq)
    ).all()
    results = [OperationResult.model_validate(row.result) for row in rows]
    return results, any(row.last for row in rows)


def earned_outcome(
    operations: list[OperationResult],
) -> tuple[ExecutionOutcome, str | None, str | None]:
    """The outcome completed operations earn: the first failed one fails the
    execution with its code (the worker's rule), otherwise it succeeded."""
    failed = next((op for op in operations if not op.ok), None)
    if failed is None:
        return ExecutionOutcome.SUCCEEDED, None, None
    return ExecutionOutcome.FAILED, failed.failure_code, failed.failure_message
