"""The inbox's HTTP server: uvicorn on the service's event loop, started and
stopped with `m3grpc serve`.

The socket is bound here, before the service starts its workers, so a busy
port refuses the start like the gRPC port does (and port 0 takes any free
port). uvicorn's own signal handling is off: `serve` owns SIGTERM and stops
the inbox with everything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn

from m3grpc.api.config import is_loopback
from m3grpc.api.inbox.access import InboxAccess
from m3grpc.api.inbox.routes import build_app
from m3grpc.api.watch import PendingWatch
from m3grpc.runtime import Runtime


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the service handles SIGTERM/SIGINT and calls InboxServer.stop


def allowed_hosts(address: str) -> tuple[str, ...]:
    """Host headers a loopback inbox answers (its own names, IPv6's `[::1]` as a Host
    header writes it); any for other binds. The same test of loopback as the
    service's exposure check, which lets a loopback inbox run without tokens."""
    if not is_loopback(address):
        return ("*",)
    host = address.rpartition(":")[0].lower()
    return ("localhost", "127.0.0.1", "[::1]", host)


class InboxServer:
    """The inbox on `address` (HOST:PORT); `bind` then `start`, and `stop`."""

    def __init__(
        self,
        runtime: Runtime,
        watch: PendingWatch,
        address: str,
        access: InboxAccess | None = None,
    ) -> None:
        self._address = address
        self._config = uvicorn.Config(
            build_app(runtime, watch, allowed_hosts=allowed_hosts(address), access=access),
            lifespan="off",
            log_config=None,  # uvicorn's records go through the service's formatter
            log_level="warning",  # not its start-up lines
            access_log=False,
            timeout_graceful_shutdown=5,
        )
        self._server = _Server(self._config)
        self._socket: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self.address = ""  # HOST:PORT once bound

    def bind(self) -> str:
        """Bind the listen socket (OSError if it cannot); returns HOST:PORT bound."""
        host, _, port = self._address.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._socket = sock
        bound_port = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.address = f"{shown}:{bound_port}"
        return self.address

    async def start(self) -> None:
        assert self._socket is not None, "bind first"
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the inbox stopped while starting")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop accepting; open event streams end when the service's shutdown is set."""
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        if self._socket is not None:
            self._socket.close()
