"""Where a runtime's store calls run (m3grpc/runtime/offload.py): on the event loop's
thread, in a greenlet, while every runtime started on the loop is a SQLite one; on the
store's threads otherwise (PostgreSQL's statements wait on the network)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from m3grpc.runtime.offload import offload, offload_lease, store_calls_on_loop
from m3grpc.storage.loop_calls import suspend

CALLER = contextvars.ContextVar("caller", default="")


def where() -> str:
    return threading.current_thread().name


def test_store_calls_run_on_the_loop_only_while_every_runtime_there_is_sqlite() -> None:
    async def scenario() -> None:
        main = threading.current_thread().name
        assert (await offload(where)).startswith("m3-store")  # no runtime: threads
        with store_calls_on_loop(True):
            assert await offload(where) == main
            assert await offload_lease(where) == main
            with store_calls_on_loop(False):  # a PostgreSQL runtime joins the loop
                assert (await offload(where)).startswith("m3-store")
                assert (await offload_lease(where)).startswith("m3-lease")
            assert await offload(where) == main
        assert (await offload(where)).startswith("m3-store")

    asyncio.run(scenario())


def test_a_call_on_the_loop_sees_the_callers_context_and_changes_only_its_own() -> None:
    def read_then_set() -> str:
        seen = CALLER.get()
        CALLER.set("changed by the call")
        return seen

    async def scenario() -> None:
        CALLER.set("the caller")
        with store_calls_on_loop(True):
            assert await offload(read_then_set) == "the caller"
        assert CALLER.get() == "the caller"

    asyncio.run(scenario())


def test_a_call_on_the_loop_raises_its_own_error_to_its_caller() -> None:
    def fails() -> None:
        raise LookupError("no such round")

    async def scenario() -> None:
        with store_calls_on_loop(True):
            try:
                await offload(fails)
            except LookupError as exc:
                assert str(exc) == "no such round"
            else:
                raise AssertionError("no error")

    asyncio.run(scenario())


def test_a_call_that_never_waits_runs_in_its_callers_task() -> None:
    # A read or a validation costs no task of its own; only a call that waits (for
    # its write's commit) is driven on by one (see test_group_commit_loop).
    async def scenario() -> None:
        caller = asyncio.current_task()
        with store_calls_on_loop(True):
            assert await offload(asyncio.current_task) is caller

    asyncio.run(scenario())


def test_suspend_outside_a_store_call_is_refused() -> None:
    async def scenario() -> None:
        future = asyncio.get_running_loop().create_future()
        with pytest.raises(RuntimeError):
            suspend(future)

    asyncio.run(scenario())
