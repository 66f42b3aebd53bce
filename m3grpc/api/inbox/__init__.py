"""The web inbox: a person answers pending rounds in a browser.

Served by `m3grpc serve` on its own HTTP port when `[inbox] listen` or
`--inbox-listen` is set (off by default), in the service's own process and
event loop. It reaches rounds only through the runtime facade, exactly as the
gRPC servicers do: the live list is the WatchPending event source (as
Server-Sent Events), an answer goes through the same `respond` as gRPC
`Respond`, and a round's history is the same redacted `ElicitationRound`.

- `server`: the HTTP server (uvicorn) started and stopped with the service.
- `routes`: the Starlette application, the page and its JSON endpoints.
- `feed`: WatchPending events as a `text/event-stream`.
- `problems`: typed errors as JSON (the gRPC status, with its field violations).
- `static/`: the page, its script (the schema form) and its style sheet; nothing
  loads from the network.
"""

from m3grpc.api.inbox.server import InboxServer

__all__ = ["InboxServer"]
