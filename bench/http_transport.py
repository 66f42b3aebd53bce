"""CPU per HTTP exchange of the MCP sessions' HTTP client: httpx2's AsyncClient on
`m3grpc/harness/http11_transport.py`, as the harness uses it.

A legacy round is seven or eight HTTP exchanges (initialize, its notification, the GET
stream, tools/list, the call, the answer, the DELETE), so this transport's cost per
exchange shows in every round's service CPU. The peer is a minimal HTTP/1.1 server in a
subprocess of its own (asyncio streams, fixed answers as an MCP server would give them: a
POST answered with a one-event `text/event-stream` in chunks, one with a JSON body of a
known length), so that its CPU is not counted: the figure is this process's CPU time
(`time.process_time`) per exchange, over `--exchanges` of them, `--in-flight` at a time,
on one kept-alive pool, after a warm-up. Loopback only; every loop is bounded.

    python bench/http_transport.py [--exchanges 16000] [--in-flight 16] [--runs 3]

To compare two versions of the transport on the same machine, alternate this run with
one of a copy of this file placed outside any checkout, with `PYTHONPATH` at the other one.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(1, str(BENCH.parent))

EVENT = (
    b'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":'
    b'[{"type":"text","text":"booked"}],"isError":false}}\n\n'
)
JSON_BODY = b'{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}'
COMMON = b"mcp-session-id: 0123456789abcdef\r\ndate: Tue, 01 Dec 2026 20:00:00 GMT\r\n"
EVENT_STREAM = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    + COMMON
    + b"transfer-encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n0\r\n\r\n" % (len(EVENT), EVENT)
)
JSON_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    + COMMON
    + b"content-length: %d\r\n\r\n%s" % (len(JSON_BODY), JSON_BODY)
)
MESSAGE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "book_shipment", "arguments": {"crate": "c1"}},
}
WARM_UP = 200


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":", 1)[1]))
            writer.write(EVENT_STREAM if head.startswith(b"POST /events") else JSON_ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(sock: socket.socket) -> None:
    server = await asyncio.start_server(_answer, sock=sock)
    await server.serve_forever()


def serve_forever(fd: int) -> None:
    """The peer (a subprocess): answers on the listening socket it inherited."""
    asyncio.run(_serve(socket.socket(fileno=fd)))


async def _exchange(client: object, url: str) -> None:
    import httpx2

    assert isinstance(client, httpx2.AsyncClient)
    headers = {"accept": "application/json, text/event-stream"}
    async with client.stream("POST", url + "/events", json=MESSAGE, headers=headers) as response:
        async for _ in response.aiter_bytes():
            pass
    (await client.post(url + "/json", json=MESSAGE)).json()


async def measure(port: int, exchanges: int, in_flight: int) -> float:
    """This process's CPU microseconds per exchange (each `_exchange` is two)."""
    import httpx2

    from m3grpc.harness.http11_transport import Http11Transport

    url = f"http://127.0.0.1:{port}"
    headers = {"mcp-session-id": "0123456789abcdef"}
    async with httpx2.AsyncClient(transport=Http11Transport(), headers=headers) as client:
        for _ in range(WARM_UP):
            await _exchange(client, url)
        batches = max(1, exchanges // (2 * in_flight))
        started = time.process_time()
        for _ in range(batches):
            await asyncio.gather(*(_exchange(client, url) for _ in range(in_flight)))
        spent = time.process_time() - started
    return spent / (batches * in_flight * 2) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=16000)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--serve-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fd is not None:
        serve_forever(args.serve_fd)
        return
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    peer = subprocess.Popen(
        [sys.executable, __file__, "--serve-fd", str(listener.fileno())],
        pass_fds=(listener.fileno(),),
    )
    try:
        figures = [
            asyncio.run(measure(port, args.exchanges, args.in_flight)) for _ in range(args.runs)
        ]
    finally:
        peer.terminate()
        peer.wait(10)
        listener.close()
    print(
        f"HTTP exchanges through httpx2 + Http11Transport, {args.in_flight} in flight: "
        f"{statistics.median(figures):.1f} us CPU each (median of {args.runs} runs: "
        + ", ".join(f"{f:.1f}" for f in figures)
        + ")"
    )


if __name__ == "__main__":
    main()
