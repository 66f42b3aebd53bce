"""WatchPending as Server-Sent Events: the inbox's live list of pending rounds.

The stream is the gRPC WatchPending stream (all executions the caller may see),
event for event:
first the rounds pending now, then rounds becoming pending and leaving pending.
Each SSE message has the event's cursor as its `id`, so a browser's
EventSource that reconnects (it sends `Last-Event-ID`) resumes right after
the last event it got, across service restarts; `event` names the kind
(`round_pending`, `round_left_pending`, `execution_finished`) and `data` is
the event as proto JSON. A comment line every `keepalive` seconds keeps
proxies from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf import json_format

from m3grpc.api.watch import PendingWatch, ServiceShuttingDown, WatchEvent
from m3grpc.errors import M3Error

log = logging.getLogger(__name__)
_DONE = object()


def to_json(message: Any) -> dict[str, Any]:
    """A message as proto JSON with the proto's field names (the ones field paths use)."""
    document: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return document


def sse(event: str, data: object, event_id: str | None = None) -> bytes:
    lines = []
    if event_id:
        lines.append(f"id: {event_id}")
    lines.append(f"event: {event}")
    # JSON on one line: no newline can break the framing.
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


async def event_stream(
    watch: PendingWatch, cursor: str, *, principal: str | None = None, keepalive: float = 15.0
) -> AsyncIterator[bytes]:
    """The SSE bytes of one watch from `cursor` ("": the pending rounds, then live);
    `principal`: only that principal's executions (None: every execution)."""
    yield b"retry: 1000\n\n"  # reconnect quickly after a restart
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=64)
    task = asyncio.create_task(_pump(watch, cursor, principal, queue))
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), keepalive)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            if item is _DONE:
                return
            if isinstance(item, bytes):
                yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _pump(
    watch: PendingWatch, cursor: str, principal: str | None, queue: asyncio.Queue[object]
) -> None:
    try:
        async for event in watch.stream("", cursor, principal):
            await queue.put(_message(event))
    except ServiceShuttingDown:
        pass  # the browser reconnects with Last-Event-ID
    except M3Error as error:  # e.g. a cursor the server cannot read
        await queue.put(sse("stream_error", {"reason": error.reason, "message": error.message}))
    except Exception:
        log.exception("the inbox's event stream failed")
    await queue.put(_DONE)


def _message(event: WatchEvent) -> bytes:
    kind = event.WhichOneof("event")
    document = to_json(event)
    return sse(kind or "unknown", document, event.cursor)
