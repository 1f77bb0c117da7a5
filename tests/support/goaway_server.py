"""``python -m tests.support.goaway_server``: an embedder going away as a client connects.

It listens on 127.0.0.1 (port 0, printed on stdout), reads the first connection's HTTP/2
preface, answers with SETTINGS and a GOAWAY carrying INTERNAL_ERROR, as a server torn
down mid-connection does, and stops listening (later connections are refused, so the
client fails at once). With ``--settings-first``
the SETTINGS that make the client ready go out alone, the GOAWAY in a segment of its own
right after, and the connection stays open until the client drops it: the client's first
request then mostly reaches the connection after it read the GOAWAY but before gRPC's core
marked the connection gone (2 runs in 3 on a 2-core machine, against 1 in 30 with both
in one segment). gRPC's C core logs ``Got goaway ...``
for a crossing one unless ``GRPC_VERBOSITY`` silences the core.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

INTERNAL_ERROR = 2


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, 0]) + struct.pack(">I", 0) + payload


def answer(conn: socket.socket, mode: str) -> None:
    with conn:
        try:
            conn.recv(65536)
            settings = frame(4, b"")
            goaway = frame(7, struct.pack(">II", 0, INTERNAL_ERROR) + b"restarting")
            if mode == "--settings-first":
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.sendall(settings)
                conn.sendall(goaway)
            else:
                conn.sendall(settings + goaway)
            # A server going away gracefully keeps the connection until the client drops it.
            while conn.recv(65536) and mode == "--settings-first":
                pass
        except OSError:
            pass


@contextmanager
def going_away(mode: str | None = None) -> Iterator[int]:
    """The port of a fresh server in ``mode`` (None or ``--settings-first``)."""
    command = [sys.executable, "-m", "tests.support.goaway_server"] + ([mode] if mode else [])
    root = Path(__file__).resolve().parent.parent.parent
    server = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=root)
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline())
    finally:
        server.kill()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()


def main() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    listener.close()
    answer(conn, sys.argv[1] if len(sys.argv) > 1 else "")


if __name__ == "__main__":
    main()
