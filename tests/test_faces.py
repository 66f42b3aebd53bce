"""One submit API, four faces: the embedded and remote kits, sync and async, offer
the same agent `submit`, the same kit `submit` per flavour, and the same handle
methods (m3grpc/submit_options.py)."""

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
HANDLE_METHODS = ("pending_elicitation", "respond_elicitation", "snapshot", "result", "cancel")


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
    for cls in ASYNC_HANDLES:
        assert inspect.iscoroutinefunction(getattr(cls, method)), cls.__name__


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
