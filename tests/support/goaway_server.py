"""``python -m tests.support.goaway_server``: an embedder going away as a client connects.

It listens on 127.0.0.1 (port 0, printed on stdout), reads the first connection's HTTP/2
preface, answers with SETTINGS and a GOAWAY carrying INTERNAL_ERROR, as a server torn
down mid-connection does, and stops listening (later connections are refused, so the
client fails at once). With ``--after-request`` it answers the client's first request
with the GOAWAY instead of sending it as the client connects. gRPC's C core logs
``Got goaway ...`` for a crossing one unless ``GRPC_VERBOSITY`` silences the core.
"""

from __future__ import annotations

import socket
import struct
import sys

INTERNAL_ERROR = 2


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, 0]) + struct.pack(">I", 0) + payload


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS = 1


def first_request(conn: socket.socket) -> None:
    """Read until the client's first request (a HEADERS frame) has arrived, so the GOAWAY
    below is the answer to it rather than crossing it on the wire: a client whose request
    crossed a GOAWAY for stream 0 could wait out its whole deadline (1 search in 8 on a
    loaded machine)."""
    data = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
        at = len(PREFACE)
        while len(data) >= at + 9:
            length = int.from_bytes(data[at : at + 3], "big")
            if data[at + 3] == HEADERS:
                return
            at += 9 + length
        if len(data) > 1 << 20:
            return


def answer(conn: socket.socket, after_request: bool) -> None:
    with conn:
        try:
            if after_request:
                first_request(conn)
            else:
                conn.recv(65536)
            goaway = struct.pack(">II", 0, INTERNAL_ERROR) + b"restarting"
            conn.sendall(frame(4, b"") + frame(7, goaway))
            conn.recv(65536)
        except OSError:
            pass


def main() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    listener.close()
    answer(conn, after_request="--after-request" in sys.argv)


if __name__ == "__main__":
    main()
