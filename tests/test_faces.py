"""One submit API, four faces: the embedded and remote kits, sync and async, offer
the same agent `submit`, the same kit `submit` per flavour, and one handle API: the
same public methods with the same signatures on every execution handle, so that a
program written against the embedded kit runs on the remote one (m3grpc/submit_options.py)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from m3grpc.client import (
    AsyncRemoteAgent,
    AsyncRemoteExecutionHandle,
    AsyncRemoteMCPTestKit,
    RemoteAgent,
    RemoteExecutionHandle,
    RemoteMCPTestKit,
)
from m3grpc.kit import (
    Agent,
    AsyncAgent,
    AsyncExecutionHandle,
    AsyncMCPTestKit,
    ExecutionHandle,
    MCPTestKit,
)
from m3grpc.submit_options import RespondOutcome, SubmitOptions

AGENTS: dict[str, type] = {
    "Agent": Agent,
    "AsyncAgent": AsyncAgent,
    "RemoteAgent": RemoteAgent,
    "AsyncRemoteAgent": AsyncRemoteAgent,
}
SYNC_HANDLES = (ExecutionHandle, RemoteExecutionHandle)
ASYNC_HANDLES = (AsyncExecutionHandle, AsyncRemoteExecutionHandle)
# (embedded, remote) of each flavour.
HANDLE_PAIRS = (
    (ExecutionHandle, RemoteExecutionHandle),
    (AsyncExecutionHandle, AsyncRemoteExecutionHandle),
)
HANDLE_METHODS = (
    "pending_elicitation",
    "wait_for_pending",
    "pending_rounds",
    "respond_elicitation",
    "snapshot",
    "result",
    "cancel",
)
# The gRPC stream with cursors that resume across service restarts: the remote
# handles' own (an embedded program waits with wait_for_pending / pending_rounds).
REMOTE_ONLY = {"watch_pending"}
# Iterators, not calls: a generator on the sync handles, an async generator on the others.
ITERATORS = {"pending_rounds"}


def _shape(function: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    """Parameter names, kinds and defaults (annotations differ: a remote server is a name)."""
    parameters = inspect.signature(function).parameters.values()
    return [(p.name, p.kind, p.default) for p in parameters]


def _public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, inspect.isfunction) if name[0] != "_"}


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_agent_submit_is_the_same_on_every_face(name: str) -> None:
    assert _shape(AGENTS[name].submit) == _shape(Agent.submit)


def test_agent_submit_options_are_the_submit_options_model() -> None:
    shape = _shape(Agent.submit)
    assert [entry[:2] for entry in shape[:3]] == [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("prompt", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("server", inspect.Parameter.KEYWORD_ONLY),
    ]
    options = [
        (f.name, inspect.Parameter.KEYWORD_ONLY, f.default)
        for f in dataclasses.fields(SubmitOptions)
    ]
    assert shape[3:] == options


def test_agent_submit_is_async_exactly_on_the_async_faces() -> None:
    for cls in (AsyncAgent, AsyncRemoteAgent):
        assert inspect.iscoroutinefunction(cls.submit)
    for cls in (Agent, RemoteAgent):
        assert not inspect.iscoroutinefunction(cls.submit)


def test_kit_submit_matches_its_flavour() -> None:
    # The documented forms: MCPTestKit.submit(spec, human_input="fail") and
    # AsyncMCPTestKit.submit(spec, *, human_input="fail").
    assert _shape(RemoteMCPTestKit.submit) == _shape(MCPTestKit.submit)
    assert _shape(AsyncRemoteMCPTestKit.submit) == _shape(AsyncMCPTestKit.submit)
    kinds = {name: kind for name, kind, _ in _shape(MCPTestKit.submit)}
    assert kinds["human_input"] is inspect.Parameter.POSITIONAL_OR_KEYWORD
    kinds = {name: kind for name, kind, _ in _shape(AsyncMCPTestKit.submit)}
    assert kinds["human_input"] is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("method", HANDLE_METHODS)
def test_handle_methods_are_the_same_on_every_handle(method: str) -> None:
    expected = _shape(getattr(ExecutionHandle, method))
    for cls in (*SYNC_HANDLES, *ASYNC_HANDLES):
        assert _shape(getattr(cls, method)) == expected, cls.__name__
    for cls in SYNC_HANDLES:
        assert not inspect.iscoroutinefunction(getattr(cls, method)), cls.__name__
        if method in ITERATORS:
            assert inspect.isgeneratorfunction(getattr(cls, method)), cls.__name__
    for cls in ASYNC_HANDLES:
        if method in ITERATORS:
            assert inspect.isasyncgenfunction(getattr(cls, method)), cls.__name__
        else:
            assert inspect.iscoroutinefunction(getattr(cls, method)), cls.__name__


@pytest.mark.parametrize("method", HANDLE_METHODS)
def test_handle_methods_return_the_same_types_embedded_and_remote(method: str) -> None:
    for embedded, remote in HANDLE_PAIRS:
        returns = inspect.get_annotations(getattr(embedded, method), eval_str=True)["return"]
        assert inspect.get_annotations(getattr(remote, method), eval_str=True)["return"] == (
            returns
        ), (remote.__name__, method)


def test_embedded_and_remote_handles_offer_one_api() -> None:
    # Everything an embedded program calls on a handle, the remote handle has (the
    # README's first example waits with wait_for_pending), and the other way round
    # but for the remote stream.
    for embedded, remote in HANDLE_PAIRS:
        assert _public_methods(embedded) == set(HANDLE_METHODS), embedded.__name__
        assert _public_methods(remote) == set(HANDLE_METHODS) | REMOTE_ONLY, remote.__name__


def test_sync_and_async_twins_offer_the_same_methods() -> None:
    assert set(HANDLE_METHODS) <= _public_methods(ExecutionHandle)
    assert _public_methods(ExecutionHandle) == _public_methods(AsyncExecutionHandle)
    remote = _public_methods(RemoteExecutionHandle)
    assert remote == _public_methods(AsyncRemoteExecutionHandle)
    assert "watch_pending" in remote
    for name in remote:
        sync, aio = getattr(RemoteExecutionHandle, name), getattr(AsyncRemoteExecutionHandle, name)
        assert _shape(sync) == _shape(aio), name
    # The remote kits too; `submit` differs as documented (test_kit_submit_matches_its_flavour).
    assert _public_methods(RemoteMCPTestKit) == _public_methods(AsyncRemoteMCPTestKit)
    for name in _public_methods(RemoteMCPTestKit) - {"submit"}:
        sync, aio = getattr(RemoteMCPTestKit, name), getattr(AsyncRemoteMCPTestKit, name)
        assert _shape(sync) == _shape(aio), name


def test_every_handle_answers_respond_with_a_respond_outcome() -> None:
    for cls in (*SYNC_HANDLES, *ASYNC_HANDLES):
        hints = inspect.get_annotations(cls.respond_elicitation, eval_str=True)
        assert hints["return"] is RespondOutcome, cls.__name__
