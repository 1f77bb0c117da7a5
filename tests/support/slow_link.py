"""A TCP forwarder holding each chunk for a while in both directions: a slow network link
(a VPN, another region) between a client and a server on this machine."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress


def _pump(source: socket.socket, sink: socket.socket, delay: float) -> None:
    try:
        while chunk := source.recv(65536):
            time.sleep(delay)  # the link's latency, not a synchronisation
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@contextmanager
def slow_link(target_port: int, delay: float) -> Iterator[int]:
    """The port of a forwarder to 127.0.0.1:``target_port`` delaying every chunk by
    ``delay`` seconds each way."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    opened: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", target_port))
            opened.extend((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b, delay), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        with suppress(OSError):  # wakes the accept (close alone leaves it waiting)
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        for sock in opened:
            sock.close()
        thread.join(10)
