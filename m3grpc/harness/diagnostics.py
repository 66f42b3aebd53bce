"""Why an MCP server could not be reached, in words an operator can act on.

A failed connection surfaces from the SDK as nested task-group
`ExceptionGroup`s around the real cause, and a stdio server that dies on start
(`No module named 'mcp'`) says why only on its stderr. This module keeps a
bounded tail of a stdio server's stderr and turns a connection failure into one
message: the command that was not found, the URL that could not be reached,
or the server's last stderr lines. No exception reprs.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import deque
from typing import TextIO, cast

import anyio
import httpx2
from mcp import MCPError

from m3grpc.servers import HttpServer, ServerBinding, StdioServer

logger = logging.getLogger(__name__)
# A stdio server's stderr lines, one log record each (WARNING: without logging
# set up they still reach stderr, as when the server inherited it).
server_stderr = logging.getLogger("m3grpc.mcp_server")

# What a failure message quotes of a server's stderr: its last lines, in all at
# most this many characters (the rest of the output is in the service's log).
STDERR_TAIL_LINES = 20
STDERR_TAIL_CHARS = 4096
# How long a failure report waits for a dead server's stderr to be drained.
_STDERR_DRAIN_SECONDS = 2.0
_READ_SIZE = 4096


class StderrTail:
    """A stdio server's stderr: passed through to the service's own stderr (as an
    inherited stderr would be) while its last lines are kept for failure messages.

    A pipe drained by a daemon thread: the thread ends, closing the read end, at
    EOF, which comes when the server process (and any child holding the pipe) ends.
    """

    def __init__(self, label: str) -> None:
        read_fd, write_fd = os.pipe()  # not inheritable: only the server gets it
        # os.fdopen in text mode is a TextIOWrapper; typeshed types it as a bare IO.
        self._writer: TextIO | None = cast(TextIO, os.fdopen(write_fd, "w"))
        self._lines: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._partial = b""
        self._lock = threading.Lock()
        self._eof = threading.Event()
        self._label = label
        threading.Thread(
            target=self._drain, args=(read_fd,), name=f"mcp-stderr-{label}", daemon=True
        ).start()

    @property
    def errlog(self) -> TextIO:
        """The file to hand to the spawn as the server's stderr."""
        assert self._writer is not None, "errlog is only needed until the spawn"
        return self._writer

    def release_writer(self) -> None:
        """Close this process's copy of the write end (after the spawn, or if it failed),
        so that EOF comes when the server's copies close."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _drain(self, read_fd: int) -> None:
        try:
            while chunk := os.read(read_fd, _READ_SIZE):
                self._pass_through(self._keep(chunk))
        except OSError:
            logger.debug("reading an MCP server's stderr failed", exc_info=True)
        finally:
            os.close(read_fd)
            with self._lock:
                last = self._partial
                if last:
                    self._lines.append(_text(last))
                    self._partial = b""
            if last:
                self._pass_through([last])
            self._eof.set()

    def _keep(self, chunk: bytes) -> list[bytes]:
        """Keep the tail; returns the lines `chunk` completed."""
        with self._lock:
            *complete, partial = (self._partial + chunk).split(b"\n")
            self._lines.extend(_text(line) for line in complete[-STDERR_TAIL_LINES:])
            # A line without an end is kept only up to the bound of the whole tail.
            self._partial = partial[-STDERR_TAIL_CHARS:]
        return complete

    def _pass_through(self, lines: list[bytes]) -> None:
        # The server's stderr still reaches the service's log, a record per
        # line, so a JSON log stays one object per line.
        for line in lines:
            text = _text(line)
            if text.strip():
                server_stderr.warning(
                    "%s", text, extra={"event": "mcp_server.stderr", "server": self._label}
                )

    def snapshot(self) -> str:
        """The last lines read so far (at most STDERR_TAIL_LINES / STDERR_TAIL_CHARS)."""
        with self._lock:
            lines = [line for line in self._lines if line.strip()]
            if self._partial.strip():
                lines.append(_text(self._partial))
        kept: list[str] = []
        size = 0
        for line in reversed(lines):
            size += len(line) + 1
            if size > STDERR_TAIL_CHARS:
                break
            kept.append(line)
        return "\n".join(reversed(kept))

    async def drained(self) -> str:
        """The tail once the server's stderr has closed (a bounded wait for a
        process that just died), else what has been read so far."""
        await anyio.to_thread.run_sync(
            self._eof.wait, _STDERR_DRAIN_SECONDS, abandon_on_cancel=True
        )
        return self.snapshot()


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="replace").rstrip("\r")[-STDERR_TAIL_CHARS:]


def leaf_exception(exc: BaseException) -> BaseException:
    """The meaningful exception inside nested ExceptionGroups (the first that is
    not a cancellation), or `exc` itself."""
    while isinstance(exc, BaseExceptionGroup):
        members = list(exc.exceptions)
        exc = next(
            (m for m in members if not isinstance(m, anyio.get_cancelled_exc_class())),
            members[0],
        )
    return exc


def describe(exc: BaseException) -> str:
    """An exception's own message, on one line (its type name if it has none)."""
    if isinstance(exc, MCPError):
        text = exc.message
    elif isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    else:
        text = str(exc)
    return " ".join(text.split()) or type(exc).__name__


def connect_failure(server: ServerBinding, exc: BaseException, stderr_tail: str | None) -> str:
    """Why the connection to `server` could not be opened, for OperationResult.failure_message."""
    leaf = leaf_exception(exc)
    if isinstance(server, StdioServer):
        if isinstance(leaf, OSError) and leaf.errno in (errno.ENOENT, errno.EACCES):
            cwd = os.fspath(server.cwd) if server.cwd is not None else None
            # asyncio's spawn names the missing directory in the error; uvloop's names
            # nothing (an application may run the kit on uvloop), so look at it too.
            named = leaf.filename is not None and os.fspath(leaf.filename) == cwd
            if cwd is not None and (named or not os.path.isdir(cwd)):
                return f"working directory {cwd!r} of MCP server {server.name!r} not found"
            if leaf.errno == errno.ENOENT:
                return f"command not found: {server.command!r} (MCP server {server.name!r})"
            return f"command not executable: {server.command!r} (MCP server {server.name!r})"
        if isinstance(leaf, OSError) and not isinstance(leaf, ConnectionError):
            return f"cannot start MCP server {server.name!r} ({server.command!r}): {describe(leaf)}"
        return _with_stderr(
            f"MCP server {server.name!r} ({server.command!r}) failed before the MCP "
            f"handshake completed: {describe(leaf)}",
            stderr_tail,
        )
    assert isinstance(server, HttpServer)
    if isinstance(leaf, httpx2.TransportError):
        reason = describe(leaf)
        root = _root_cause(leaf)
        if root is not None and root not in reason:
            reason = f"{reason} ({root})"  # "All connection attempts failed (Connection refused)"
        return f"could not reach {server.url} (MCP server {server.name!r}): {reason}"
    if isinstance(leaf, httpx2.HTTPStatusError):
        status = leaf.response.status_code
        return f"MCP server {server.name!r} at {server.url} answered HTTP {status}"
    return f"cannot connect to MCP server {server.name!r} at {server.url}: {describe(leaf)}"


def _root_cause(exc: BaseException) -> str | None:
    """The OS-level reason at the bottom of an exception chain, if there is one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    root: OSError | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            root = current
        current = current.__cause__ or current.__context__
    if root is None:
        return None
    if root.errno is not None and root.errno > 0:
        return os.strerror(root.errno)  # ECONNREFUSED's strerror is "Connect call failed (...)"
    return describe(root)


def connection_lost(message: str, stderr_tail: str | None) -> str:
    """A lost connection's message, with the stdio server's last stderr lines."""
    return _with_stderr(message, stderr_tail)


def _with_stderr(message: str, stderr_tail: str | None) -> str:
    if stderr_tail is None:
        return message
    if not stderr_tail:
        return f"{message}; the server wrote nothing to stderr"
    return f"{message}; the server's stderr ends with:\n{stderr_tail}"
