"""One MCP client session per 2026-07-28 Streamable HTTP binding, shared by its executions.

A 2026-07-28 session holds no state on the server: no session id, no GET stream, and
every request is its own POST whose response carries everything about it (its result,
its notifications). Opening one per execution cost a task group, memory streams, an
HTTP client and a new TCP connection each time. Here the executions of a binding
(same URL and headers) in one event loop send their requests on one session instead.

What stays each execution's own:
- its requests: each is one POST that the execution's own task sends and reads
  (`contained_http.PostDispatcher`), so cancelling an execution aborts exactly its
  POSTs (2026-07-28 cancellation);
- what the server sends while one of its requests runs (an `elicitation/create`,
  `roots/list`, `notifications/elicitation/complete`): handled in the sending task,
  so the session's callbacks find the execution in a context variable (`current_user`);
- one request's HTTP failure fails that request only.

A session is opened by the first execution that needs it, in a task of its own (so no
execution's cancel scope or trace context is the session's), and closed once no
execution has used it for `linger` seconds, when it is retired (a failure that may
mean the server changed: the next execution opens a new one, asking `server/discover`
again) and its last user left, or by `aclose` (the runtime stopping). A session whose
task ended (a bug in the SDK's loop) fails its callers' requests `CONNECTION_CLOSED`
and is replaced for later executions.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Hashable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from mcp import Client

logger = logging.getLogger(__name__)

# How long an unused session stays open for the next execution of its binding (s).
LINGER_SECONDS = 5.0

Opener = Callable[[AsyncExitStack], Awaitable[Client]]

# The execution whose request the current task serves (set by the harness around its
# requests; read by the shared session's callbacks).
current_user: contextvars.ContextVar[Any] = contextvars.ContextVar("m3_mcp_session_user")


@dataclass(eq=False)
class _Entry:
    key: Hashable
    ready: asyncio.Future[Client]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    owner: asyncio.Task[None] | None = None
    users: int = 0
    retired: bool = False
    linger: asyncio.TimerHandle | None = None


class Lease:
    """One execution's use of a shared session; `release` once, when it is done."""

    def __init__(self, sessions: SharedSessions, entry: _Entry, client: Client) -> None:
        self._sessions = sessions
        self._entry = entry
        self.client = client
        self._released = False

    def retire(self) -> None:
        """Later executions get a new session (this one closes when its users leave)."""
        self._sessions._retire(self._entry)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._sessions._release(self._entry)


class SharedSessions:
    """The shared sessions of one event loop, by key."""

    def __init__(self, *, linger: float = LINGER_SECONDS) -> None:
        self._linger = linger
        self._entries: dict[Hashable, _Entry] = {}
        # Each session's task, while it runs.
        self._owners: dict[asyncio.Task[None], _Entry] = {}

    async def acquire(self, key: Hashable, open: Opener) -> Lease:
        """A lease on the live session for `key`, opened with `open` if there is none.
        Raises what opening raised (every execution waiting for it gets the error)."""
        entry = self._entries.get(key)
        if entry is None or entry.stop.is_set() or (entry.owner is not None and entry.owner.done()):
            entry = self._start(key, open)
        entry.users += 1
        if entry.linger is not None:
            entry.linger.cancel()
            entry.linger = None
        try:
            client = await asyncio.shield(entry.ready)
        except BaseException:
            self._release(entry)
            raise
        return Lease(self, entry, client)

    async def aclose(self) -> None:
        """Close every session nobody uses now (the others as their last user leaves)
        and wait for the closed ones' tasks."""
        for entry in list(self._entries.values()):
            if entry.users == 0:
                self._close(entry)
            else:
                self._retire(entry)
        closing = [owner for owner, entry in self._owners.items() if entry.stop.is_set()]
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)

    def _start(self, key: Hashable, open: Opener) -> _Entry:
        loop = asyncio.get_running_loop()
        entry = _Entry(key=key, ready=loop.create_future())
        # An empty context: the session's tasks belong to no execution (its trace
        # context, its cancellation) however long they live.
        owner = loop.create_task(
            self._own(entry, open), name="m3-shared-mcp-session", context=contextvars.Context()
        )
        entry.owner = owner
        self._owners[owner] = entry
        owner.add_done_callback(self._forget_owner)
        self._entries[key] = entry
        return entry

    async def _own(self, entry: _Entry, open: Opener) -> None:
        # Why opening failed: raised to the waiting executions once the half-opened
        # session is closed (closing it may wrap the error in the SDK's task groups).
        failure: Exception | None = None
        try:
            async with AsyncExitStack() as stack:
                try:
                    client = await open(stack)
                except Exception as exc:
                    failure = exc
                else:
                    entry.ready.set_result(client)
                    await entry.stop.wait()
        except Exception as exc:
            if failure is None and not entry.ready.done():
                failure = exc
            elif failure is None:
                logger.warning("shared MCP session %r ended", entry.key, exc_info=True)
        finally:
            if not entry.ready.done():
                entry.ready.set_exception(failure or ConnectionError("the MCP session closed"))
                entry.ready.exception()  # retrieved: no "never retrieved" warning
            entry.stop.set()
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]

    def _forget_owner(self, owner: asyncio.Task[None]) -> None:
        self._owners.pop(owner, None)

    def _retire(self, entry: _Entry) -> None:
        entry.retired = True
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        if entry.users == 0:
            self._close(entry)

    def _release(self, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users > 0 or entry.stop.is_set():
            return
        if entry.retired or self._linger <= 0:
            self._close(entry)
        else:
            loop = asyncio.get_running_loop()
            entry.linger = loop.call_later(self._linger, self._close, entry)

    def _close(self, entry: _Entry) -> None:
        if entry.linger is not None:
            entry.linger.cancel()
            entry.linger = None
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        entry.stop.set()


__all__ = ["LINGER_SECONDS", "Lease", "SharedSessions", "current_user"]
