"""Wake the worker processes of one `m3grpc serve` on SQLite for each other's commits.

SQLite cannot notify other processes (PostgreSQL replicas hear each other by
LISTEN/NOTIFY, m3grpc/runtime/replica_wakes.py), so with `workers.processes > 1`
the service and its worker processes are linked by a Unix socket pair each
(service <-> child; the service relays between children). After each commit a
process sends the changes it announced (m3grpc.storage.changes: a Submit, a
Respond, a round becoming pending, an execution finishing, a cancel request) to
its links; the receiver wakes the waiters they concern exactly as a heard NOTIFY
does (`ReplicaWakes.dispatch`). A lost or dropped message costs latency only:
every waiter still re-reads the database at its polling interval.

Messages are SOCK_SEQPACKET packets, one JSON list of [kind, execution_id,
round_id] per commit: whole or not at all, so the committing thread sends them
itself without a lock or a hop to the event loop, and never blocks (a peer
whose buffer is full misses the message and polls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Protocol

from m3grpc.storage import SqlExecutionStore
from m3grpc.storage.changes import Change

log = logging.getLogger(__name__)

# At most this many changes per packet: far below a socket buffer (a big group
# commit is split), and a packet is read whole with one recv.
_CHANGES_PER_PACKET = 64
_RECEIVE_BYTES = 1 << 16


class Subscriber(Protocol):
    """What a runtime on SQLite attaches: its store, and where heard changes go."""

    @property
    def store(self) -> SqlExecutionStore: ...

    def heard(self, changes: Sequence[Change]) -> None:
        """Other processes' changes; called on the links' event loop."""


def link_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of sockets for one link (the service's end, the child's end)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def encode(changes: Sequence[Change]) -> list[bytes]:
    return [
        json.dumps(
            [[c.kind, c.execution_id, c.round_id] for c in changes[i : i + _CHANGES_PER_PACKET]]
        ).encode()
        for i in range(0, len(changes), _CHANGES_PER_PACKET)
    ]


def decode(packet: bytes) -> list[Change]:
    try:
        items = json.loads(packet)
    except ValueError:
        return []
    changes = []
    for item in items if isinstance(items, list) else []:
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and (item[2] is None or isinstance(item[2], str))
        ):
            changes.append(Change(item[0], item[1], item[2]))
    return changes


class LocalWakes:
    """This process's links to the other processes of its `m3grpc serve` (none
    outside one), and the runtimes on SQLite they wake."""

    def __init__(self) -> None:
        self._links: list[socket.socket] = []
        self._subscribers: list[Subscriber] = []
        # The store change listener registered for each subscriber, while linked.
        self._sending: dict[int, Callable[[list[Change]], None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # Messages a full peer buffer made us drop (they cost that peer a poll).
        self.dropped = 0

    @property
    def linked(self) -> bool:
        return bool(self._links)

    def attach(self, subscriber: Subscriber) -> None:
        """A runtime on SQLite started: its commits go to the links, the links'
        changes to it. Call on its event loop's thread."""
        self._subscribers.append(subscriber)
        if self._links:
            self._send_from(subscriber)

    def detach(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)
        listener = self._sending.pop(id(subscriber), None)
        if listener is not None:
            subscriber.store.remove_change_listener(listener)

    def connect(self, links: Sequence[socket.socket]) -> None:
        """Start using `links` (connected SOCK_SEQPACKET sockets). Call on the
        event loop's thread that runs the attached runtimes."""
        self._loop = asyncio.get_running_loop()
        for link in links:
            link.setblocking(False)
            self._links.append(link)
            self._loop.add_reader(link.fileno(), self._readable, link)
        for subscriber in self._subscribers:
            if id(subscriber) not in self._sending:
                self._send_from(subscriber)

    def close(self) -> None:
        """Close every link (call on the links' loop thread)."""
        for link in list(self._links):
            self._drop(link)
        for subscriber in list(self._subscribers):
            listener = self._sending.pop(id(subscriber), None)
            if listener is not None:
                subscriber.store.remove_change_listener(listener)

    # -- sending: on the committing thread ------------------------------------------

    def _send_from(self, subscriber: Subscriber) -> None:
        def send(changes: list[Change]) -> None:
            if self._links:
                self._send(encode(changes), None)

        self._sending[id(subscriber)] = send
        subscriber.store.add_change_listener(send)

    def _send(self, packets: list[bytes], source: socket.socket | None) -> None:
        for link in list(self._links):
            if link is source:
                continue
            for packet in packets:
                try:
                    link.send(packet)
                except BlockingIOError:
                    self.dropped += 1  # the peer polls for it
                except OSError:
                    break  # the peer is gone: its reader sees the end and drops the link

    # -- receiving: on the loop -------------------------------------------------------

    def _readable(self, link: socket.socket) -> None:
        changes: list[Change] = []
        while True:
            try:
                packet = link.recv(_RECEIVE_BYTES)
            except BlockingIOError:
                break
            except OSError:
                packet = b""
            if not packet:  # the peer is gone (exited, or closed its end)
                self._drop(link)
                break
            # The service passes one child's changes on to the others.
            self._send([packet], link)
            changes += decode(packet)
        if changes:
            for subscriber in list(self._subscribers):
                subscriber.heard(changes)

    def _drop(self, link: socket.socket) -> None:
        if link in self._links:
            self._links.remove(link)
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(link.fileno())
        with contextlib.suppress(OSError):
            link.close()
        if not self._links:
            log.debug("no more linked worker processes")


# One per process: the links a service (or a worker process) has, by process.
HUB = LocalWakes()
