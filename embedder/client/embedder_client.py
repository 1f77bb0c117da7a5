"""The client every frontend uses to get vectors from the embedder (docs/embedder.md §client).

One ``EmbedderClient`` per process holds one gRPC channel. ``embed`` auto-starts a local
embedder on a unix socket when nothing answers, retries an overloaded server twice (after
100 ms and 300 ms, within the deadline) and a channel that dropped once. Every failure is
an ``EmbedderUnavailable(cause, fix)`` except a request the server rejects as invalid,
which is an ``EmbedRequestError`` (also a ``ValueError``): retrying cannot fix that one.

Before any call on a unix socket the client checks that the socket, its directory and the
process listening are the current user's (``socket_trust``), else ``EmbedderUntrusted``
and nothing is sent. TCP and dns addresses use TLS per ``client_tls``, which also names
the cause of a failed handshake.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

import thatch.embedder.grpc_env  # noqa: F401  (first: it quiets gRPC's C core before it loads)

# isort: split

import grpc
import numpy as np
import numpy.typing as npt
from grpc_health.v1 import health_pb2, health_pb2_grpc

from thatch.common.environment import socket_dir
from thatch.embedder.client.autostart import (
    STILL_STARTING,
    AutoStarter,
    Health,
    offline_error,
    start_failure,
    untrusted,
)
from thatch.embedder.client.errors import (
    FIX_OVERLOADED,
    FIX_REMOTE,
    FIX_START,
    FIX_STARTING,
    EmbedderUnavailable,
    EmbedRequestError,
)
from thatch.embedder.client.kind import Kind
from thatch.embedder.client.settings import Address, configured_address, parse_address
from thatch.embedder.client.socket_trust import (
    check_path,
    peer_problem,
    probe,
    tighten_own_directory,
)
from thatch.embedder.v1 import embedder_pb2, embedder_pb2_grpc

if TYPE_CHECKING:
    from thatch.embedder.client.tls import TlsConfig

__all__ = ["EmbedResult", "EmbedderClient"]

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
OVERLOAD_DELAYS = (0.1, 0.3)
FIX_FAILED = "run thatch doctor"
OVERLOADED = "the embedder is overloaded"
# What gRPC's status details say when a connection (or its TLS handshake) failed.
_CONNECT_FAILURES = ("failed to connect", "Socket closed", "andshake", "Connection reset")
# A connection attempt that timed out (packets dropped: a VPN down): no TLS mismatch looks
# like that, and the diagnosis's own connection would wait as long again.
_CONNECT_TIMEOUTS = ("handshaker shutdown", "Timeout occurred", "timed out")

_KINDS = {Kind.QUERY: embedder_pb2.QUERY, Kind.PASSAGE: embedder_pb2.PASSAGE}


@dataclass(frozen=True)
class EmbedResult:
    vectors: npt.NDArray[np.float32]  # [n, dim], L2-normalised, input order; read-only
    model_id: str
    token_counts: list[int]
    truncated: list[bool]
    # The server's own account of the call (queue, tokenize, inference, total), in µs.
    timing: embedder_pb2.Timing = field(default_factory=embedder_pb2.Timing)


def clean_text(text: str) -> str:
    """Replace lone surrogates with U+FFFD: proto strings must be valid UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Through UTF-16 so that a well-formed surrogate pair becomes its real character.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def build_request(texts: Sequence[str], kind: Kind) -> embedder_pb2.EmbedRequest:
    if isinstance(texts, (str, bytes)):
        raise EmbedRequestError("texts must be a list of strings, not a single string")
    if not isinstance(kind, Kind):
        raise EmbedRequestError("kind must be QUERY or PASSAGE")
    if len(texts) == 0:
        raise EmbedRequestError("texts must not be empty")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise EmbedRequestError(f"texts[{index}] must be a string, not {type(text).__name__}")
    request = embedder_pb2.EmbedRequest(texts=[clean_text(t) for t in texts], kind=_KINDS[kind])
    size = request.ByteSize()
    if size > MAX_MESSAGE_BYTES:
        raise EmbedRequestError(
            f"request too large: {size} bytes (max {MAX_MESSAGE_BYTES}); send fewer texts per call"
        )
    return request


def _tls_config(address: Address, env: Mapping[str, str]) -> TlsConfig | None:
    # Imported for TCP addresses only: ssl costs a unix-socket hook ~5 ms to import.
    from thatch.embedder.client.tls import tls_config

    return tls_config(address, env)


def make_channel(address: Address, tls: TlsConfig | None) -> grpc.Channel:
    options: list[tuple[str, int | str]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        # A freshly spawned server must be reachable as soon as it binds, not after
        # gRPC's default reconnect backoff (1 s, growing to 120 s).
        ("grpc.initial_reconnect_backoff_ms", 100),
        # gRPC's core also takes this as the time a connection attempt is given: at 100 ms
        # an embedder 150 ms away each way (a VPN, another region) failed every first
        # call as "no embedder answering". 2 s covers a TLS handshake's three round trips
        # of up to 600 ms, and bounds what an unreachable one (a VPN down, packets
        # dropped) costs a call; a refused connection still fails at once.
        ("grpc.min_reconnect_backoff_ms", 100 if address.is_unix else 2000),
        ("grpc.max_reconnect_backoff_ms", 1000 if address.is_unix else 5000),
        # No transparent retries: a request crossing the GOAWAY of an embedder going away
        # was retried by gRPC's core onto the same dying connection, again and again
        # until the deadline (30 s). Without them it fails with UNAVAILABLE at once, and
        # embed's own retry and auto-start take over.
        ("grpc.enable_retries", 0),
    ]
    if address.kind == "dns":
        options.append(("grpc.lb_policy_name", "round_robin"))
    if tls is None:
        return grpc.insecure_channel(address.target, options=options)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert
    )
    return grpc.secure_channel(address.target, credentials, options=options)


class EmbedderClient:
    """One gRPC channel to the embedder; create one per process and ``close`` it.

    ``notice`` (optional) is called once when auto-start has waited a second, so a CLI
    can print ``Starting embedder…``. ``repair=False`` (``thatch doctor``, which only
    looks) never makes thatch's own socket directory 0700; it is judged as if it were,
    since the first call of any other client does that.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        autostart: bool = True,
        notice: Callable[[], None] | None = None,
        repair: bool = True,
    ) -> None:
        self.env: Mapping[str, str] = dict(os.environ if env is None else env)
        self.address = configured_address(self.env) if address is None else parse_address(address)
        self.autostart = autostart and self.address.is_unix
        self._notice = notice
        self._repair = repair
        self._tls = None if self.address.is_unix else _tls_config(self.address, self.env)
        self._channel = make_channel(self.address, self._tls)
        self._stub = embedder_pb2_grpc.EmbedderStub(self._channel)
        # Any: types-grpcio-health-checking declares no methods on HealthStub.
        self._health: Any = health_pb2_grpc.HealthStub(self._channel)
        self._worked = False  # a call has succeeded on this channel
        self._trusted: tuple[int, int] | None = None  # the socket file whose peer we checked
        self._start_lock = threading.Lock()

    # -- public API -------------------------------------------------------------------

    def embed(
        self,
        texts: Sequence[str],
        kind: Kind,
        *,
        timeout: float = 30.0,
        start_wait: float = 20.0,
    ) -> EmbedResult:
        """Vectors for ``texts``; ``timeout`` bounds the calls, ``start_wait`` an auto-start.

        ``start_wait=0`` (hooks) spawns a missing embedder in the background and fails at
        once with "still starting".
        """
        request = build_request(texts, kind)
        deadline = time.monotonic() + timeout
        delays = list(OVERLOAD_DELAYS)
        retried = started = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._deadline_error(timeout)
            if not self._socket_ready():
                if self.autostart and not started:
                    started = True
                    self._start(start_wait, required=True)
                    deadline = time.monotonic() + timeout
                    continue
                raise self._absent_error(started)
            try:
                response = self._stub.Embed(request, timeout=remaining)
            except grpc.RpcError as error:
                code = error.code()
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED and not _too_large(error):
                    if delays and time.monotonic() + delays[0] < deadline:
                        time.sleep(delays.pop(0))
                        continue
                    raise EmbedderUnavailable(
                        "the embedder is overloaded", FIX_OVERLOADED
                    ) from None
                if code == grpc.StatusCode.UNAVAILABLE:
                    if self._worked and not retried:
                        retried = True
                        continue
                    if self.autostart and not started:
                        started = True
                        self._start(start_wait, required=True)
                        deadline = time.monotonic() + timeout
                        continue
                raise self._error(error, timeout, started=started) from None
            self._worked = True
            return _result(response, len(request.texts))

    def info(self, *, timeout: float = 2.0) -> embedder_pb2.InfoResponse:
        """The server's model and runtime facts; never starts an embedder."""
        if not self._socket_ready():
            raise self._absent_error(started=False)
        try:
            response: embedder_pb2.InfoResponse = self._stub.Info(
                embedder_pb2.InfoRequest(), timeout=timeout
            )
        except grpc.RpcError as error:
            raise self._error(error, timeout) from None
        self._worked = True
        return response

    def health(self, *, timeout: float = 0.2) -> Health:
        """``SERVING``, ``NOT_SERVING`` (starting, stopping, load failed) or ``UNREACHABLE``."""
        return self._check_health(timeout, wait_for_ready=False)

    def check_trusted(self) -> None:
        """Raise ``EmbedderUntrusted`` when every call would be refused before sending: the
        unix socket, its directory or its listener is not the current user's."""
        self._socket_ready()

    def connection_problem(self) -> EmbedderUnavailable | None:
        """Why a remote embedder cannot be reached at the TLS layer (its real cause), if so."""
        if self.address.is_unix:
            return None
        from thatch.embedder.client.tls import diagnose

        return diagnose(self.address, self._tls)

    def ensure_started(self, *, wait: float) -> None:
        """Auto-start a local embedder if none runs and wait up to ``wait`` s for SERVING.

        ``wait=0`` spawns in the background if needed and returns at once. Remote addresses
        are never spawned: they must answer within ``wait``.
        """
        self._start(wait, required=False)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> EmbedderClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------

    def _socket_ready(self) -> bool:
        """Whether a call may go out: False when no socket is there (unix), True for TCP.

        Raises ``EmbedderUntrusted`` before anything is sent when the socket, its directory
        or the process listening is not the current user's. A directory only we can write
        keeps a checked socket file ours, so its listener is probed once per socket file.
        """
        path = self.address.path
        if path is None:
            return True
        own = path.parent == socket_dir(self.env)  # thatch's own directory: made private
        check = check_path(path, tightened=own and not self._repair)
        if check.problem is not None and own and tighten_own_directory(path.parent):
            check = check_path(path)
        if check.problem is not None:
            raise untrusted(self.address, check.problem)
        if check.identity is None:
            return False
        if check.identity != self._trusted:
            peer = probe(path)
            if peer.state == "listening" and peer.pid is not None and peer.uid is not None:
                problem = peer_problem(path, peer.pid, peer.uid)
                if problem is not None:
                    raise untrusted(self.address, problem)
                self._trusted = check.identity
            elif peer.state in ("absent", "not_socket"):
                return False
        return True

    def _absent_error(self, started: bool) -> EmbedderUnavailable:
        if started:  # it served a moment ago, then went away again
            return start_failure(self.address, "the embedder went away")
        return EmbedderUnavailable(f"nothing is listening at {self.address}", FIX_START)

    def _remote_unavailable(self, details: str) -> EmbedderUnavailable:
        """The TLS mismatch behind a failed connection, when that is what it is."""
        timed_out = any(sign in details for sign in _CONNECT_TIMEOUTS)
        if not timed_out and any(sign in details for sign in _CONNECT_FAILURES):
            diagnosis = self.connection_problem()
            if diagnosis is not None:
                return diagnosis
        return EmbedderUnavailable(f"no embedder answering at {self.address}", FIX_REMOTE)

    def _check_health(self, timeout: float, *, wait_for_ready: bool) -> Health:
        try:
            response = self._health.Check(
                health_pb2.HealthCheckRequest(service=""),
                timeout=timeout,
                wait_for_ready=wait_for_ready,
            )
        except grpc.RpcError as error:
            if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return "UNREACHABLE"
            return "NOT_SERVING"  # something answers, but not a ready embedder
        serving = response.status == health_pb2.HealthCheckResponse.SERVING
        return "SERVING" if serving else "NOT_SERVING"

    def _start(self, wait: float, *, required: bool) -> None:
        """Auto-start (unix) or wait for a remote server; ``required``: raise unless SERVING."""
        if not self.address.is_unix:
            self._wait_remote(wait, required=required)
            return
        starter = AutoStarter(
            self.address,
            self.env,
            lambda timeout: self._check_health(timeout, wait_for_ready=True),
            self._notice,
        )
        with self._start_lock:  # threads of one frontend share the channel and one attempt
            outcome = starter.run(wait)
        if required and not outcome.serving:
            raise EmbedderUnavailable(STILL_STARTING, FIX_STARTING)

    def _wait_remote(self, wait: float, *, required: bool) -> None:
        if wait <= 0 and not required:
            return
        deadline = time.monotonic() + wait
        while True:
            remaining = deadline - time.monotonic()
            if self._check_health(max(min(remaining, 1.0), 0.2), wait_for_ready=True) == "SERVING":
                return
            if time.monotonic() >= deadline:
                raise self._remote_unavailable(_CONNECT_FAILURES[0])

    def _deadline_error(self, timeout: float) -> EmbedderUnavailable:
        return EmbedderUnavailable(
            f"the embedder did not answer within {timeout:g} s", FIX_OVERLOADED
        )

    def _error(self, error: grpc.RpcError, timeout: float, *, started: bool = False) -> Exception:
        code = error.code()
        details = error.details() or ""
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return EmbedRequestError(details or "the embedder rejected the request")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            if _too_large(error):
                return EmbedRequestError(f"request or response too large: {details}")
            return EmbedderUnavailable(OVERLOADED, FIX_OVERLOADED)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            if details.startswith("deadline exceeded: embedding these texts"):
                # The server's own estimate (nothing queued ahead): retrying cannot help.
                return EmbedderUnavailable(details, "send fewer or shorter texts at a time")
            return self._deadline_error(timeout)
        if code == grpc.StatusCode.UNAVAILABLE:
            # The server's own words, not any "starting": a GOAWAY's text may say "restarting".
            if "embedder is starting" in details:
                return EmbedderUnavailable(STILL_STARTING, FIX_STARTING)
            if not self.address.is_unix:
                return self._remote_unavailable(details)
            if started:  # it served a moment ago, then went away again
                return start_failure(self.address, details or "the embedder went away")
            return EmbedderUnavailable(f"nothing is listening at {self.address}", FIX_START)
        offline = offline_error(details)
        if offline is not None:
            return offline
        return EmbedderUnavailable(
            f"the embedder failed ({code.name}: {details or 'no details'})", FIX_FAILED
        )


def _too_large(error: grpc.RpcError) -> bool:
    return "larger than max" in (error.details() or "")


def _result(response: embedder_pb2.EmbedResponse, count: int) -> EmbedResult:
    dim = response.dim
    if response.count != count or dim == 0 or len(response.vectors) != count * dim * 4:
        raise EmbedderUnavailable(
            f"the embedder sent a malformed response ({response.count} vectors of dim {dim} in "
            f"{len(response.vectors)} bytes for {count} texts)",
            "stop it, then retry: thatch embedder stop",
        )
    vectors = np.frombuffer(response.vectors, dtype="<f4").reshape(count, dim)
    return EmbedResult(
        vectors=vectors.astype(np.float32, copy=False),
        model_id=response.model_id,
        token_counts=list(response.token_counts),
        truncated=list(response.truncated),
        timing=response.timing,
    )
