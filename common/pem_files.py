"""Whether TLS files are what a server needs: gRPC reports a certificate or key it cannot
use only as a failure to bind, so the servers (embedder, hub) ask here which file it was,
after such a failure only (imported then: ssl costs a start ~5 ms)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

__all__ = ["unusable_ca", "unusable_pair"]


def unusable_pair(cert: Path, key: Path) -> str | None:
    """Why ``cert`` and ``key`` are not a PEM certificate (chain) and its unencrypted
    private key, in OpenSSL's words; None when OpenSSL loads them."""
    context = _context()
    # gRPC takes no passphrase: an encrypted key is as unusable as a wrong one.
    return _problem(lambda: context.load_cert_chain(cert, key, password=lambda: b""))


def unusable_ca(ca: Path) -> str | None:
    """Why ``ca`` is not a PEM CA certificate; None when OpenSSL loads it."""
    context = _context()
    return _problem(lambda: context.load_verify_locations(cafile=ca))


def _context() -> ssl.SSLContext:

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # judge the files, not the key sizes
    return context


def _problem(load: Callable[[], object]) -> str | None:
    try:
        load()
    except (ssl.SSLError, OSError) as error:
        return str(error.strerror or error)
    return None
