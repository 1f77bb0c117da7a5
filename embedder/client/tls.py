"""TLS for frontends talking to a remote embedder (docs/embedder.md §client, §transport).

Settings: ``THATCH_EMBEDDER_CA`` (PEM bundle the server's certificate must chain to;
default: the system's roots) and ``THATCH_EMBEDDER_CERT`` with ``THATCH_EMBEDDER_KEY``
(the client certificate an embedder started with ``--tls-client-ca`` requires). Any of
them turns TLS on for TCP and dns addresses; unix sockets never use TLS.

gRPC reports every failed handshake as "failed to connect" or "Socket closed", so when a
TLS channel cannot connect, ``diagnose`` repeats the handshake with the standard library's
``ssl`` and names the real cause: the server's certificate is not trusted or not valid for
the host, the server wants a client certificate, it refused ours, or one side does not
speak TLS at all.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from thatch.common.environment import env_get, expand_user
from thatch.embedder.client.errors import EmbedderUnavailable
from thatch.embedder.client.settings import Address

__all__ = ["TlsConfig", "diagnose", "tls_config"]

CA, CERT, KEY = "THATCH_EMBEDDER_CA", "THATCH_EMBEDDER_CERT", "THATCH_EMBEDDER_KEY"
DIAGNOSE_SECONDS = 2.0
HOST_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
# The HTTP/2 client preface and an empty SETTINGS frame: a gRPC server answers it.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_NOT_TLS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG")
FIX_CA = f"point {CA} at the CA that signed the certificate of the embedder"
FIX_NO_TLS = f"unset {CA}, {CERT} and {KEY}, or serve with --tls-cert and --tls-key"


@dataclass(frozen=True)
class TlsConfig:
    """PEM bytes read from the settings; ``ca`` None means the system's roots."""

    ca: bytes | None
    cert: bytes | None
    key: bytes | None
    ca_path: str | None = None  # as the settings name them (messages quote these)
    cert_path: str | None = None
    key_path: str | None = None
    cert_file: Path | None = None  # cert_path and key_path with ~ expanded
    key_file: Path | None = None


def _read(name: str, value: str, what: str, env: Mapping[str, str]) -> bytes:
    try:
        with open(expand_user(value, env), "rb") as handle:
            return handle.read()
    except OSError as error:
        raise EmbedderUnavailable(
            f"cannot read {name} {value}: {error.strerror or error}",
            f"point {name} at a readable PEM file of {what}",
        ) from error


def tls_config(address: Address, env: Mapping[str, str]) -> TlsConfig | None:
    """The client's TLS settings for ``address``; None for plaintext (and unix sockets)."""
    if address.is_unix:
        return None
    ca, cert, key = env_get(env, CA), env_get(env, CERT), env_get(env, KEY)
    if (cert is None) != (key is None):
        given, missing = (CERT, KEY) if cert is not None else (KEY, CERT)
        raise EmbedderUnavailable(
            f"{given} is set but {missing} is not",
            f"set both {CERT} and {KEY} (the client certificate and its private key, PEM), "
            "or neither",
        )
    if ca is None and cert is None:
        return None
    config = TlsConfig(
        ca=_read(CA, ca, "the embedder's CA", env) if ca else None,
        cert=_read(CERT, cert, "the client certificate", env) if cert else None,
        key=_read(KEY, key, "the client certificate's private key", env) if key else None,
        ca_path=ca,
        cert_path=cert,
        key_path=key,
        cert_file=expand_user(cert, env) if cert else None,
        key_file=expand_user(key, env) if key else None,
    )
    if cert is not None and key is not None:
        _check_pair(cert, key, env)
    return config


def _check_pair(cert: str, key: str, env: Mapping[str, str]) -> None:
    """A certificate and key that do not belong together fail here, not in every handshake."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(
            expand_user(cert, env), expand_user(key, env)
        )
    except (ssl.SSLError, OSError) as error:
        reason = getattr(error, "reason", None) or error.strerror or str(error)
        raise EmbedderUnavailable(
            f"{CERT} {cert} and {KEY} {key} are not a PEM certificate and its key ({reason})",
            f"set {CERT} and {KEY} to a matching certificate and private key",
        ) from None


def _host_port(address: Address) -> tuple[str, int]:
    target = address.target.removeprefix("dns:///")
    host, _, port = target.rpartition(":")
    return host.strip("[]"), int(port)


def _context(config: TlsConfig | None, host: str) -> ssl.SSLContext:
    """A client context like gRPC's; without ``config``, one that verifies nothing."""
    if config is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif config.ca is not None:
        context = ssl.create_default_context(cadata=config.ca.decode("ascii", "replace"))
    else:
        context = ssl.create_default_context()
    if config is not None and config.cert_file and config.key_file:
        context.load_cert_chain(config.cert_file, config.key_file)
    context.set_alpn_protocols(["h2"])
    return context


def diagnose(
    address: Address, config: TlsConfig | None, timeout: float = DIAGNOSE_SECONDS
) -> EmbedderUnavailable | None:
    """Why a connection to ``address`` fails at the TLS layer; None when TLS is not why."""
    host, port = _host_port(address)
    try:
        context = _context(config, host)
        raw = socket.create_connection((host, port), timeout=timeout)
    except (OSError, ssl.SSLError, ValueError):
        return None  # nothing answers (or the settings cannot even load): not a TLS matter
    with raw:
        try:
            conn = context.wrap_socket(raw, server_hostname=host)
        except ssl.SSLCertVerificationError as error:
            return _untrusted_server(address, host, config, error)
        except ssl.SSLError as error:
            if config is not None and error.reason in _NOT_TLS:
                return EmbedderUnavailable(
                    f"the embedder at {address} does not use TLS", FIX_NO_TLS
                )
            if config is None:
                return None  # a plaintext server: TLS is not the problem
            return EmbedderUnavailable(
                f"TLS handshake with the embedder at {address} failed ({error.reason or error})",
                FIX_CA,
            )
        except OSError:
            return None
        with conn:
            if config is None:  # the handshake worked, so the server wants TLS
                return EmbedderUnavailable(
                    f"the embedder at {address} requires TLS",
                    f"set {CA} to the CA that signed its certificate",
                )
            return _verdict_on_client(address, config, conn)


def _untrusted_server(
    address: Address, host: str, config: TlsConfig | None, error: ssl.SSLCertVerificationError
) -> EmbedderUnavailable:
    detail = str(error.verify_message).rstrip(".")
    if error.verify_code in HOST_MISMATCH:
        return EmbedderUnavailable(
            f"the embedder's certificate is not valid for {host} ({detail})",
            "connect by a name the certificate lists (THATCH_EMBEDDER_ADDR), or reissue it",
        )
    by = f"{CA} {config.ca_path}" if config is not None and config.ca_path else "the system's CAs"
    return EmbedderUnavailable(
        f"the certificate of the embedder at {address} is not trusted by {by} ({detail})",
        FIX_CA,
    )


def _verdict_on_client(
    address: Address, config: TlsConfig, conn: ssl.SSLSocket
) -> EmbedderUnavailable | None:
    """TLS 1.3 servers judge the client's certificate after the handshake: read their answer."""
    try:
        conn.sendall(_H2_PREFACE)
        answer = conn.recv(1)
    except ssl.SSLError as error:  # an alert naming the refusal
        answer, reason = b"", str(error.reason or error)
    except OSError:
        return None  # a slow or vanished server: not a TLS matter
    else:
        reason = "it closed the connection"
    if answer:
        return None  # the server speaks HTTP/2 to us: TLS is fine
    if config.cert is None:
        return EmbedderUnavailable(
            f"the embedder at {address} requires a client certificate",
            f"set {CERT} and {KEY} to a certificate its --tls-client-ca signed",
        )
    return EmbedderUnavailable(
        f"the embedder at {address} refused the client certificate {CERT} {config.cert_path} "
        f"({reason})",
        "use a certificate signed by the CA the embedder was given with --tls-client-ca",
    )
