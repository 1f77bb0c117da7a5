"""Binding a gRPC server to an ``Address``: the embedder's server and the team hub's.

Lives beside ``Address`` (``settings.py``), the one piece of the embedder's surface both
servers share; importing it loads grpc and nothing of the model runtime.
"""

from __future__ import annotations

import os

import grpc

from thatch.embedder.client.settings import Address

__all__ = ["add_port"]


def add_port(
    server: grpc.Server, address: Address, credentials: grpc.ServerCredentials | None
) -> int:
    """Listen on ``address`` (TLS when ``credentials``) and return the bound port.

    A unix socket is created under umask 077 and left 0600: no moment exists in which
    another user could connect. Raises ``RuntimeError`` (grpc's) when it cannot listen.
    """
    previous_umask = os.umask(0o077) if address.is_unix else None
    try:
        if credentials is not None:
            port = server.add_secure_port(address.target, credentials)
        else:
            port = server.add_insecure_port(address.target)
    finally:
        if previous_umask is not None:
            os.umask(previous_umask)
    if address.is_unix and address.path is not None:
        address.path.chmod(0o600)
    return port
