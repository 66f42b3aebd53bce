"""The stdio end of M3's agent relay (see `m3grpc.harness.relay`).

An agent CLI starts this as its MCP server: `python -I -S relay_pipe.py SOCKET`.
It connects to the relay's Unix socket in the worker process and copies bytes
both ways until either side closes. Standard library only, and started without
site-packages (`-S`): it must start fast and import nothing of the project.

- The agent closes stdin (it stops): the socket's write side is shut, the relay
  ends the session and closes, and this exits.
- The relay closes (the worker stops or dies): this exits at once, so the agent
  sees its MCP server go away.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

_CHUNK = 64 * 1024


def _copy_stdin(sock: socket.socket) -> None:
    try:
        while data := os.read(0, _CHUNK):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(1, view)
        view = view[written:]


def main() -> None:
    if len(sys.argv) != 2:
        sys.stderr.write("usage: relay_pipe.py SOCKET\n")
        sys.exit(2)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(sys.argv[1])
    except OSError as exc:
        sys.stderr.write(f"m3 relay: cannot connect to {sys.argv[1]}: {exc}\n")
        sys.exit(1)
    threading.Thread(target=_copy_stdin, args=(sock,), daemon=True).start()
    try:
        while data := sock.recv(_CHUNK):
            _write_all(data)
    except OSError:
        pass
    # The daemon thread may still block in read(0): leave without joining it.
    os._exit(0)


if __name__ == "__main__":
    main()
