"""Store fixtures, parametrized over every backend available here.

SQLite always runs (a real file in tmp_path). PostgreSQL runs when
M3_TEST_POSTGRES_URL names a server (CI starts one); each test gets its own
fresh database on it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from m3grpc.storage import SqlExecutionStore, SqlManagedInputStore
from m3grpc.types import (
    ElicitationResponse,
    FormElicitationRequest,
    ManagedInputLease,
    PendingElicitationRound,
    UrlElicitationRequest,
)

POSTGRES_URL = os.environ.get("M3_TEST_POSTGRES_URL")


@dataclass
class ManualClock:
    """A store clock tests move by hand, so lease expiry needs no sleeping."""

    now: datetime = field(default_factory=lambda: datetime(2026, 1, 1, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def postgres_database(prefix: str = "m3_test") -> Iterator[str]:
    """A fresh database on the test PostgreSQL (its URL), dropped afterwards."""
    assert POSTGRES_URL is not None
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


# The backends a `database` fixture runs over: PostgreSQL only when configured.
BACKENDS = [
    "sqlite",
    pytest.param(
        "postgresql",
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(POSTGRES_URL is None, reason="M3_TEST_POSTGRES_URL not set"),
        ],
    ),
]


def backend_database(request: pytest.FixtureRequest, sqlite_path: Path) -> Iterator[str]:
    """An empty database of the backend `request.param` names: `sqlite_path`, or
    a fresh PostgreSQL database's URL."""
    if request.param == "sqlite":
        yield str(sqlite_path)
    else:
        yield from postgres_database()


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL (or SQLite path) of one backend, empty."""
    yield from backend_database(request, tmp_path / "executions.sqlite")


@pytest.fixture
def execution_store(database: str, clock: ManualClock) -> Iterator[SqlExecutionStore]:
    store = SqlExecutionStore(database, clock=clock)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def store(execution_store: SqlExecutionStore) -> SqlManagedInputStore:
    return execution_store.managed_input_store


ADDRESS_SCHEMA = {
    "type": "object",
    "title": "ShippingAddress",
    "properties": {
        "street": {"type": "string", "minLength": 1},
        "city": {"type": "string"},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["street", "city"],
}

# A valid answer to make_round's request.
ACCEPT = {
    "shipping_address": ElicitationResponse(
        action="accept", content={"street": "1 Main Street", "city": "Pune"}
    )
}


def make_round(
    execution_id: str,
    clock: ManualClock,
    *,
    round_id: str | None = None,
    logical_operation_id: str = "op-0",
    with_url: bool = False,
    deadline: datetime | None = None,
) -> PendingElicitationRound:
    requests: dict[str, FormElicitationRequest | UrlElicitationRequest] = {
        "shipping_address": FormElicitationRequest(
            message="Where should we ship?", requested_schema=ADDRESS_SCHEMA
        )
    }
    if with_url:
        requests["consent"] = UrlElicitationRequest(
            message="Authorize", url="https://example.invalid/auth", elicitation_id="el-1"
        )
    return PendingElicitationRound(
        round_id=round_id or f"rnd_{uuid.uuid4().hex}",
        execution_id=execution_id,
        logical_operation_id=logical_operation_id,
        server="shipping",
        operation_kind="tool",
        operation_name="book_shipment",
        requests=requests,
        created_at=clock(),
        deadline=deadline,
    )


def make_lease(
    clock: ManualClock, owner_id: str = "worker-a", seconds: float = 30
) -> ManagedInputLease:
    return ManagedInputLease(
        owner_id=owner_id,
        lease_token=f"tok-{uuid.uuid4().hex}",
        expires_at=clock() + timedelta(seconds=seconds),
    )


def new_execution(execution_store: SqlExecutionStore) -> str:
    return execution_store.create_execution(
        {"prompt": "p"}, human_input="managed"
    ).state.execution_id
