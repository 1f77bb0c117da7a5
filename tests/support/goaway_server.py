"""``python -m tests.support.goaway_server``: an embedder going away as a client connects.

It listens on 127.0.0.1 (port 0, printed on stdout), reads the first connection's HTTP/2
preface, answers with SETTINGS and a GOAWAY carrying INTERNAL_ERROR, as a server torn
down mid-connection does, and stops listening (later connections are refused, so the
client fails at once). gRPC's C core logs ``Got goaway ...`` for it unless
``GRPC_VERBOSITY`` silences the core.
"""

from __future__ import annotations

import socket
import struct

INTERNAL_ERROR = 2


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, 0]) + struct.pack(">I", 0) + payload


def answer(conn: socket.socket) -> None:
    with conn:
        try:
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
    answer(conn)


if __name__ == "__main__":
    main()
