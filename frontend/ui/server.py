"""Binding and serving ``thatch ui`` with uvicorn (docs/ui.md).

The socket is bound here, before uvicorn starts, so the printed URL names the real port
(``--port 0`` picks a free one) and connections made before uvicorn accepts simply wait
in the listen queue.
"""

from __future__ import annotations

import socket
import threading

import uvicorn
from starlette.types import ASGIApp

from thatch.frontend.ui.security import Guard

__all__ = ["UiServer", "bind", "bound_port", "make_server", "page_url", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; raises OSError (port taken, bad address)."""
    infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    return sock


def bound_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def page_url(host: str, guard: Guard) -> str:
    """The URL to open: the loopback name for a wildcard bind, the token in the query."""
    name = host.strip("[]")
    if name in ("0.0.0.0", "::", ""):
        name = "127.0.0.1"
    if ":" in name:
        name = f"[{name}]"
    return f"http://{name}:{guard.port}/?token={guard.token}"


class UiServer(uvicorn.Server):
    """uvicorn's server whose stop flag is the ``stopping`` event the app watches.

    On a stop, uvicorn waits for every open response to finish; an event stream never
    does by itself, so the stream ends when it sees the event (Ctrl-C, or
    ``should_exit = True`` from another thread).
    """

    def __init__(self, config: uvicorn.Config, stopping: threading.Event) -> None:
        self.stopping = stopping
        super().__init__(config)

    @property
    def should_exit(self) -> bool:
        return self.stopping.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self.stopping.set()
        else:
            self.stopping.clear()


def make_server(app: ASGIApp, stopping: threading.Event) -> uvicorn.Server:
    """A uvicorn server for ``app`` (built with the same ``stopping``): no access log
    (URLs may carry the token), no lifespan, no signal handlers of its own when run off
    the main thread."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        server_header=False,
        proxy_headers=False,
    )
    return UiServer(config, stopping)


def serve(server: uvicorn.Server, sock: socket.socket) -> None:
    """Run until stopped (Ctrl-C, or ``server.should_exit = True`` from another thread)."""
    server.run(sockets=[sock])
