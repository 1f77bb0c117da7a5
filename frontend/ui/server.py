"""Binding and serving ``thatch ui`` with uvicorn (docs/ui.md).

The socket is bound here, before uvicorn starts, so the printed URL names the real port
(``--port 0`` picks a free one) and connections made before uvicorn accepts simply wait
in the listen queue.
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.types import ASGIApp

from thatch.frontend.ui.security import Guard


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


def make_server(app: ASGIApp) -> uvicorn.Server:
    """A uvicorn server for ``app``: no access log (URLs may carry the token), no
    lifespan, no signal handlers of its own when run off the main thread."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        server_header=False,
        proxy_headers=False,
    )
    return uvicorn.Server(config)


def serve(server: uvicorn.Server, sock: socket.socket) -> None:
    """Run until stopped (Ctrl-C, or ``server.should_exit = True`` from another thread)."""
    server.run(sockets=[sock])
