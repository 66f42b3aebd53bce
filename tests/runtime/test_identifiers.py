"""The embedded face keeps the one rule for IDs (docs/reference/identifiers.md):
a malformed ID is a ManagedInputValidationError naming its field, raised before
anything is read; a well-formed unknown one is a *NotFoundError."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from m3grpc import AsyncMCPTestKit, ElicitationResponse
from m3grpc.errors import (
    ExecutionNotFoundError,
    ManagedInputValidationError,
    RoundNotFoundError,
)
from m3grpc.runtime import Runtime
from m3grpc.storage import SQLiteExecutionStore

from .conftest import mcp_server

LONG = "x" * 5000
MALFORMED = ["", " ", "\t\n", LONG, "exe\x00"]
ANSWER = {"shipping_address": ElicitationResponse(action="decline")}


@pytest.fixture
async def kit(tmp_path: Path) -> AsyncIterator[AsyncMCPTestKit]:
    store = SQLiteExecutionStore(tmp_path / "m3.sqlite")
    try:
        async with AsyncMCPTestKit(store=store, env={}, poll_interval=0.2) as kit:
            yield kit
    finally:
        store.close()


def calls(runtime: Runtime, value: str) -> dict[str, tuple[str, Callable[[], Awaitable[Any]]]]:
    """Each embedded call sending `value` as an ID, with the field it names."""
    return {
        "snapshot": ("execution_id", lambda: runtime.snapshot(value)),
        "result": ("execution_id", lambda: runtime.result(value, timeout=1)),
        "cancel": ("execution_id", lambda: runtime.cancel(value)),
        "pending_round": ("execution_id", lambda: runtime.pending_round(value)),
        "wait_for_pending": ("execution_id", lambda: runtime.wait_for_pending(value, 1)),
        "get_round": ("round_id", lambda: runtime.get_round(value)),
        "respond": (
            "round_id",
            lambda: runtime.respond(value, ANSWER, idempotency_key="k"),
        ),
        "respond.execution_id": (
            "execution_id",
            lambda: runtime.respond("rnd_x", ANSWER, idempotency_key="k", execution_id=value),
        ),
        "respond.idempotency_key": (
            "idempotency_key",
            lambda: runtime.respond("rnd_x", ANSWER, idempotency_key=value),
        ),
    }


@pytest.mark.parametrize("value", MALFORMED, ids=["empty", "blank", "whitespace", "long", "nul"])
async def test_a_malformed_id_names_its_field(kit: AsyncMCPTestKit, value: str) -> None:
    for name, (field, call) in calls(kit.runtime, value).items():
        with pytest.raises(ManagedInputValidationError) as caught:
            await call()
        error = caught.value
        assert [v.field for v in error.field_violations] == [field], name
        assert all(len(v) <= 80 for v in error.metadata.values()), (name, error.metadata)
        assert len(str(error)) <= 300, name


async def test_a_blank_list_filter_is_malformed_and_an_empty_one_is_none(
    kit: AsyncMCPTestKit,
) -> None:
    with pytest.raises(ManagedInputValidationError) as caught:
        await kit.runtime.list_rounds(execution_id=" ")
    assert [v.field for v in caught.value.field_violations] == ["execution_id"]
    assert await kit.runtime.list_rounds(execution_id="") == []


async def test_a_well_formed_unknown_id_is_not_found(kit: AsyncMCPTestKit) -> None:
    with pytest.raises(ExecutionNotFoundError):
        await kit.runtime.snapshot("exe_unknown")
    with pytest.raises(RoundNotFoundError):
        await kit.runtime.get_round("rnd_unknown")


async def test_a_handle_refuses_a_malformed_round_id(kit: AsyncMCPTestKit) -> None:
    (agent,) = kit.agents([{"harness": "scripted", "models": []}])
    handle = await agent.submit(
        "p", server=mcp_server("shipping"), tools=["shipping:book_shipment"], human_input="managed"
    )
    pending = await handle.wait_for_pending(timeout=60)
    assert pending is not None
    with pytest.raises(ManagedInputValidationError) as caught:
        await handle.respond_elicitation(" ", ANSWER, idempotency_key="k")
    assert [v.field for v in caught.value.field_violations] == ["round_id"]
    # Its own execution's round, well-formed: answered.
    outcome = await handle.respond_elicitation(pending.round_id, ANSWER, idempotency_key="k")
    assert not outcome.replayed
    await handle.cancel()
